"""Synthetic voice calls: callers talking to a voice agent, one turn request per caller utterance.

No public voice-agent trace exists, so calls are generated. Each caller line is one session of calls; a call
is `turns_per_call` turns; a turn is the caller speaking (lognormal seconds), then a request whose prompt is
the agent's system prompt (one prefix group for every call) plus the call's dialogue so far. Reply lengths
follow the seed's figures: median 23 tokens, first sentence median 15 and at most 39, about 79% of replies
longer than 16 tokens, hardly any over 48, none over 60. The session's replies are spoken at
`speech_tokens_per_s`, so the caller's next utterance starts after the reply has been spoken (see
`Session.issue_s`).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from flatshare.policy.classes import DEFAULT_PRIORITY
from flatshare.workloads.model import Session, Workload, WorkloadRequest, clip_to_model_len
from flatshare.workloads.tokens import DEFAULT_VOCAB, PromptSpan, head_spans, prefix_group_span, unique_span


@dataclass(frozen=True)
class VoiceProfile:
    """Distributions of a voice call (lognormals given by median and sigma)."""

    speech_median_s: float = 3.0
    speech_sigma: float = 0.5
    speech_min_s: float = 0.5
    speech_max_s: float = 20.0
    caller_tokens_per_s: float = 3.25  # ~2.5 words/s spoken, ~1.3 tokens a word
    speech_tokens_per_s: float = 3.25  # the agent's reply, spoken by the speech synthesizer
    first_sentence_median: float = 15.0
    first_sentence_sigma: float = 0.25
    first_sentence_max: int = 39
    one_sentence_p: float = 0.3
    rest_median: float = 10.0
    rest_sigma: float = 0.3
    reply_max: int = 60
    system_tokens: int = 600
    turns_per_call: int = 10
    call_gap_s: float = 3.0
    nominal_ttft_s: float = 0.1
    nominal_s_per_token: float = 0.02

    def __post_init__(self) -> None:
        for name, value in vars(self).items():
            if not (np.isfinite(value) and value >= 0):
                raise ValueError(f"VoiceProfile.{name} must be a finite number >= 0, got {value}")
        if self.turns_per_call < 1 or self.system_tokens < 1 or self.first_sentence_max < 1:
            raise ValueError("VoiceProfile needs turns_per_call, system_tokens and first_sentence_max >= 1")
        if self.reply_max < self.first_sentence_max or self.speech_tokens_per_s <= 0:
            raise ValueError("VoiceProfile needs reply_max >= first_sentence_max and speech_tokens_per_s > 0")


def draw_replies(profile: VoiceProfile, rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
    """`(first_sentence_tokens, reply_tokens)` of `n` replies."""
    p = profile
    first = np.round(rng.lognormal(np.log(p.first_sentence_median), p.first_sentence_sigma, n))
    first = np.clip(first, 1, p.first_sentence_max).astype(np.int64)
    rest = np.round(rng.lognormal(np.log(p.rest_median), p.rest_sigma, n)).astype(np.int64)
    rest = np.where(rng.random(n) < p.one_sentence_p, 0, rest)
    return first, np.minimum(first + rest, p.reply_max)


def voice_calls(
    callers: int,
    duration_s: float,
    seed: int,
    *,
    profile: VoiceProfile | None = None,
    stagger_s: float = 5.0,
    max_model_len: int | None = None,
    priority: int = DEFAULT_PRIORITY["voice"],
    vocab_size: int = DEFAULT_VOCAB,
) -> Workload:
    """`callers` caller lines (`voice/0` ...) talking for `duration_s` seconds of nominal time.

    Caller i starts speaking at a uniform time in `[0, stagger_s)`. A request's `pause_before_s` is the
    caller's speech before it (plus `call_gap_s` before a new call's first turn). Nominal time (a reply takes
    `nominal_ttft_s + tokens * nominal_s_per_token`, then is spoken) decides only how many turns fit in
    `duration_s` and each request's `arrival_s`.
    """
    if callers < 1 or not duration_s > 0 or stagger_s < 0:
        raise ValueError("voice_calls needs callers >= 1, duration_s > 0 and stagger_s >= 0")
    plan = _Plan(profile or VoiceProfile(), duration_s, stagger_s, max_model_len, priority, vocab_size, seed)
    rng = np.random.default_rng([seed, 0x701CE])
    return Workload(f"voice-{callers}", tuple(_caller(i, plan, rng) for i in range(callers)), seed)


@dataclass(frozen=True)
class _Plan:
    profile: VoiceProfile
    duration_s: float
    stagger_s: float
    max_model_len: int | None
    priority: int
    vocab_size: int
    seed: int


def _caller(i: int, plan: _Plan, rng: np.random.Generator) -> Session:
    p = plan.profile
    sid = f"voice/{i}"
    requests: list[WorkloadRequest] = []
    free = float(rng.uniform(0, plan.stagger_s)) if plan.stagger_s > 0 else 0.0  # when the caller may speak
    for call in itertools.count():
        dialogue: list[PromptSpan] = [prefix_group_span("voice-system", p.system_tokens)]
        first, reply = draw_replies(p, rng, p.turns_per_call)
        speech = np.clip(
            rng.lognormal(np.log(p.speech_median_s), p.speech_sigma, p.turns_per_call),
            p.speech_min_s,
            p.speech_max_s,
        )
        for k in range(p.turns_per_call):
            pause = float(speech[k]) + (p.call_gap_s if k == 0 and call > 0 else 0.0)
            issue = free + pause
            if requests and issue >= plan.duration_s:
                return Session(
                    sid, "voice", requests[0].pause_before_s, tuple(requests), p.speech_tokens_per_s
                )
            key = f"voice/{plan.seed}/{i}/c{call}/t{k}"
            said = max(1, round(float(speech[k]) * p.caller_tokens_per_s))
            dialogue.append(unique_span(f"{key}/caller", said))
            turn = _Turn(int(first[k]), int(reply[k]), issue, issue if not requests else pause)
            requests.append(_request(f"{sid}/{len(requests)}", sid, dialogue, turn, plan))
            first_ready = issue + p.nominal_ttft_s + turn.first * p.nominal_s_per_token
            done = issue + p.nominal_ttft_s + turn.reply * p.nominal_s_per_token
            free = max(done, first_ready + turn.reply / p.speech_tokens_per_s)
            dialogue.append(unique_span(f"{key}/agent", turn.reply))
    raise AssertionError("unreachable")


@dataclass(frozen=True)
class _Turn:
    first: int
    reply: int
    issue_s: float
    pause_s: float


def _request(rid: str, sid: str, dialogue: list[PromptSpan], turn: _Turn, plan: _Plan) -> WorkloadRequest:
    n_prompt = sum(s.length for s in dialogue)
    n_prompt, max_tokens = clip_to_model_len(n_prompt, turn.reply, plan.max_model_len)
    return WorkloadRequest(
        id=rid,
        session_id=sid,
        cls="voice",
        priority=plan.priority,
        prompt=head_spans(dialogue, n_prompt),
        max_tokens=max_tokens,
        first_sentence_tokens=min(turn.first, max_tokens),
        pause_before_s=turn.pause_s,
        arrival_s=turn.issue_s,
        vocab_size=plan.vocab_size,
    )
