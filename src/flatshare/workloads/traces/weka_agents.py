"""Coding agents that replay the WEKA Claude Code sample's own sessions (`agent_source=weka` of a spec)."""

from __future__ import annotations

import numpy as np

from flatshare.workloads.model import Session, Workload, WorkloadRequest
from flatshare.workloads.synth.agents import AgentProfile
from flatshare.workloads.tokens import DEFAULT_VOCAB, hash_block_spans
from flatshare.workloads.traces.options import TraceOptions, make_request
from flatshare.workloads.traces.weka import TraceSession, read_sessions


def weka_agents(
    n: int,
    duration_s: float,
    seed: int,
    path: str,
    *,
    stagger_s: float = 30.0,
    warm_start: bool = True,
    max_model_len: int | None = None,
    vocab_size: int = DEFAULT_VOCAB,
) -> Workload:
    """`n` agents (`agent/0` ...) that replay the sessions of a WEKA file instead of generated ones.

    The file's sessions (the top level and each sub-agent) are cycled: agent i replays session `i mod S`, then
    the next ones in turn, back to back, until `duration_s` of nominal time; between two sessions it pauses as
    a generated agent does between episodes (`AgentProfile` episode pause). Within a session, calls keep
    their recorded sizes, outputs and think times. Token ids are the file's hash blocks in a namespace of the
    agent and of its pass through the file, so agents never share KV with each other or with an earlier pass
    of their own (within a pass, sessions share what the file shares: the sub-agents' system prompt). Agent
    i starts at a uniform time in `[0, stagger_s)`; with `warm_start` it joins its first session at a random
    call. Requests are clipped to `max_model_len` as `load_weka` clips them (the prompt keeps its head), have
    the agent class's priority, and `arrival_s` is the nominal issue time (calls charged as generated agents'
    are, `AgentProfile.nominal_call_s` and `nominal_s_per_output_token`).
    """
    if n < 1 or not duration_s > 0 or stagger_s < 0:
        raise ValueError("weka_agents needs n >= 1, duration_s > 0, stagger_s >= 0")
    block, sessions = read_sessions(path)
    opts = TraceOptions(max_model_len=max_model_len, vocab_size=vocab_size)
    rng = np.random.default_rng([seed, 0x3E4A])
    agents = tuple(
        _weka_agent(i, seed, sessions, block, duration_s, stagger_s, warm_start, opts, rng) for i in range(n)
    )
    return Workload(f"agents-weka-{n}", agents, seed)


def _weka_agent(
    i: int,
    seed: int,
    sessions: list[TraceSession],
    block: int,
    duration_s: float,
    stagger_s: float,
    warm_start: bool,
    opts: TraceOptions,
    rng: np.random.Generator,
) -> Session:
    prof = AgentProfile()
    sid = f"agent/{i}"
    start = float(rng.uniform(0, stagger_s)) if stagger_s > 0 else 0.0
    requests: list[WorkloadRequest] = []
    issue, done, q = start, start, 0
    while issue < duration_s:
        s = sessions[(i + q) % len(sessions)]
        space = f"weka-agents/{seed}/{i}/p{(i + q) // len(sessions)}"
        skip = int(rng.integers(0, len(s.calls))) if warm_start and q == 0 else 0
        gap = min(
            float(rng.lognormal(np.log(prof.episode_pause_median_s), prof.episode_pause_sigma)),
            prof.max_pause_s,
        )
        for k in range(skip, len(s.calls)):
            call = s.calls[k]
            pause = start if not requests else gap if k == skip else call.think_s
            issue = (
                start if not requests else done + pause if k == skip else issue + call.t - s.calls[k - 1].t
            )
            if issue >= duration_s:
                break
            rid = f"{sid}/{len(requests)}"
            prompt = hash_block_spans(call.hash_ids, block, call.n_in, space, tail_key=f"{space}/tail/{rid}")
            requests.append(
                make_request(
                    id=rid,
                    session_id=sid,
                    cls="agent",
                    options=opts,
                    prompt=prompt,
                    max_tokens=max(1, call.n_out),
                    pause_before_s=pause,
                    arrival_s=issue,
                )
            )
            done = issue + prof.nominal_call_s + call.n_out * prof.nominal_s_per_output_token
        q += 1
    return Session(sid, "agent", start, tuple(requests))
