"""The admission-control seed's synthetic case: one long-context request beside ten short ones.

"A user submits a 50,000-token document for summarisation. At the same moment, ten colleagues send short
one-line questions." The long request arrives at 0; the short ones arrive within `jitter_s` after it, so they
meet its prefill. Short prompts are 100-500 tokens; short replies at most `short_max_tokens` (<= 256).
"""

from __future__ import annotations

import numpy as np

from flatshare.policy.classes import DEFAULT_PRIORITY
from flatshare.workloads.model import Session, Workload, WorkloadRequest, clip_to_model_len
from flatshare.workloads.tokens import DEFAULT_VOCAB, unique_span


def long_short(
    long_tokens: int = 50_000,
    shorts: int = 10,
    seed: int = 0,
    *,
    long_max_tokens: int = 256,
    short_prompt_range: tuple[int, int] = (100, 500),
    short_max_tokens: int = 256,
    jitter_s: float = 0.5,
    max_model_len: int | None = None,
    vocab_size: int = DEFAULT_VOCAB,
) -> Workload:
    """One `long` request (`long_tokens` prompt) at t=0 and `shorts` `short` requests at uniform times in
    `[0, jitter_s]`, with prompts uniform in `short_prompt_range` and `max_tokens` uniform in
    `[16, short_max_tokens]`.

    Every request is its own session (open loop). Priorities are the classes' defaults (long 10, short 1);
    under vLLM's FCFS policy they are ignored. With `max_model_len`, the long prompt keeps its first tokens.
    """
    low, high = short_prompt_range
    if long_tokens < 1 or shorts < 0 or not 1 <= low <= high or not 1 <= short_max_tokens <= 256:
        raise ValueError(
            "long_short needs long_tokens >= 1, shorts >= 0, 1 <= short prompt low <= high, "
            f"1 <= short_max_tokens <= 256; got {long_tokens}, {shorts}, {short_prompt_range}, "
            f"{short_max_tokens}"
        )
    if jitter_s < 0 or long_max_tokens < 1:
        raise ValueError("long_short needs jitter_s >= 0 and long_max_tokens >= 1")
    rng = np.random.default_rng([seed, 0x10475])
    prompts = rng.integers(low, high + 1, size=shorts)
    outputs = rng.integers(min(16, short_max_tokens), short_max_tokens + 1, size=shorts)
    arrivals = rng.uniform(0.0, jitter_s, size=shorts) if jitter_s > 0 else np.zeros(shorts)
    key = f"long-short/{seed}"
    plan = [("long", 0, long_tokens, long_max_tokens, 0.0)]
    plan += [("short", i + 1, int(prompts[i]), int(outputs[i]), float(arrivals[i])) for i in range(shorts)]
    sessions = []
    for cls, i, n_prompt, n_out, t in sorted(plan, key=lambda x: (x[4], x[1])):
        rid = f"{cls}/{i}"
        n_prompt, n_out = clip_to_model_len(n_prompt, n_out, max_model_len)
        request = WorkloadRequest(
            id=rid,
            session_id=rid,
            cls=cls,
            priority=DEFAULT_PRIORITY[cls],
            prompt=(unique_span(f"{key}/{rid}", n_prompt),),
            max_tokens=n_out,
            pause_before_s=t,
            arrival_s=t,
            vocab_size=vocab_size,
        )
        sessions.append(Session(rid, cls, t, (request,)))
    return Workload(f"long-short-{long_tokens}x{shorts}", tuple(sessions), seed)
