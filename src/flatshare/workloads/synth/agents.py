"""Synthetic coding-agent sessions, drawn from distributions fit to the WEKA Claude Code sample.

Each agent is one session of episodes (a task, then a new task with a fresh context). An episode starts from
the agent's system prompt and tools (`base`, the same for all its episodes) plus a first message, and each
call resends the previous call's context plus the previous output and a tool result (`step`), so consecutive
calls share their leading token ids. When the context reaches the episode's final size, that call writes a
long answer and the episode ends. Between calls the agent pauses (tool time); between episodes, longer.

The defaults are fit to `sample_trace_with_subagent.json` (90 calls, 5 sessions): inputs 10.6k-89k tokens with
median ~39k, outputs median ~160 (episode-final answers ~4.2k; 5 of 90 calls write >= 4,000 tokens, output is
~1% of prompt tokens), context growth per call median ~2.7k (bimodal: ~200-1,000 or ~3k-12k), pauses median
3 s with rare minutes-long ones.

Under `max_model_len` an episode keeps the shape it has without one: its number of calls and its growth per
call follow the same draws, and it ends with one long answer when its *uncapped* context reaches its final
size. What changes is that the session compacts, as Claude Code does when its context fills: before a call
whose prompt plus output, plus room for the next summary, would pass `max_model_len`, the agent sends a
compaction call (the conversation up to the last reply; output: a summary, drawn as any reply is) and the
context restarts at `base + summary`, the pending tool result after it, and grows again by the same steps.
The summary is new text, so the call after a compaction hits the prefix cache only on `base`. Compaction
calls have request ids ending in `COMPACTION_SUFFIX`. The sample never compacts (its contexts stay under 89k),
so it gives no summary lengths; a summary is drawn as any reply is, which keeps output ~1% of prompt tokens at
every cap, as in the sample.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from flatshare.policy.classes import DEFAULT_PRIORITY
from flatshare.workloads.model import Session, Workload, WorkloadRequest, clip_to_model_len
from flatshare.workloads.tokens import (
    DEFAULT_VOCAB,
    Span,
    head_spans,
    prefix_group_span,
    prompt_length,
    unique_span,
)

COMPACTION_SUFFIX = "-compact"
_UNCAPPED_BASE_HIGH = 60_000
SUMMARY_CAP_FRACTION = 5
_BASE_LOW = 8_000


@dataclass(frozen=True)
class AgentProfile:
    """Distributions of one coding agent (lognormals given by median and sigma; token counts and seconds).

    A compaction's summary (only under `max_model_len`) is one more reply: its length is drawn like any
    call's output (`output_median`, `output_sigma`), so that output lengths follow the sample at every cap.
    The sample never compacts, so it says nothing of summaries; a summary drawn longer (1,500 tokens were
    tried) made summaries half of all agent output at a 16k cap, and output 6.7% of prompt tokens against
    the sample's ~1%. `summary_max` bounds it so that a compacted context plus a summary reserved for the
    next compaction still leaves room for a call.
    """

    base_median: float = 11_000.0
    base_sigma: float = 0.3
    first_message_median: float = 300.0
    first_message_sigma: float = 0.6
    small_step_p: float = 0.5
    small_step_median: float = 350.0
    small_step_sigma: float = 0.9
    big_step_median: float = 5_000.0
    big_step_sigma: float = 0.5
    final_context_low: int = 42_000
    final_context_high: int = 88_000
    output_median: float = 158.0
    output_sigma: float = 0.55
    final_output_median: float = 4_300.0
    final_output_sigma: float = 0.15
    summary_max: int = 3_000
    think_median_s: float = 2.8
    think_sigma: float = 0.4
    long_pause_p: float = 0.07
    long_pause_median_s: float = 25.0
    long_pause_sigma: float = 1.2
    episode_pause_median_s: float = 60.0
    episode_pause_sigma: float = 1.0
    max_pause_s: float = 600.0
    nominal_call_s: float = 1.0
    nominal_s_per_output_token: float = 0.02

    def __post_init__(self) -> None:
        for name, value in vars(self).items():
            if not (np.isfinite(value) and value >= 0):
                raise ValueError(f"AgentProfile.{name} must be a finite number >= 0, got {value}")
        for name in ("small_step_p", "long_pause_p"):
            if getattr(self, name) > 1:
                raise ValueError(f"AgentProfile.{name} is a probability, got {getattr(self, name)}")
        if not 1 <= self.final_context_low <= self.final_context_high:
            raise ValueError("AgentProfile needs 1 <= final_context_low <= final_context_high")
        if not 1 <= self.output_median <= self.summary_max:
            raise ValueError("AgentProfile needs 1 <= output_median <= summary_max (summaries are replies)")

    def base_high(self, max_model_len: int | None) -> int:
        """The largest `base` drawn: under `max_model_len`, room is left after `base` for a median summary
        in the context, a median big step, a median reply and a median summary reserved for the next
        compaction (so a compacted context still takes a typical call), but never less than a quarter of
        `max_model_len` is left to `base`."""
        if max_model_len is None:
            return _UNCAPPED_BASE_HIGH
        summary = min(self.output_median, summary_cap(max_model_len))
        room = 2 * summary + self.big_step_median + self.output_median
        return max(2, max_model_len // 4, max_model_len - int(np.ceil(room)))


def summary_cap(max_model_len: int) -> int:
    """The longest compaction summary under `max_model_len`."""
    return max(1, max_model_len // SUMMARY_CAP_FRACTION)


@dataclass(frozen=True)
class _Call:
    """One call: `appended` tokens after the previous call's prompt, or after `base + summary` when
    `summary` > 0 (the first call after a compaction); `index` is the call's position in the uncapped
    episode (a compaction call has the index of the call it comes before)."""

    appended: int
    output: int
    pause_s: float
    index: int
    compaction: bool = False
    summary: int = 0


class _AgentDraw:
    """Draws one agent's calls; with `max_model_len`, the session compacts instead of passing it."""

    def __init__(
        self,
        profile: AgentProfile,
        rng: np.random.Generator,
        max_model_len: int | None,
        summary_rng: np.random.Generator | None = None,
    ) -> None:
        self.p = profile
        self.rng = rng
        self.max_model_len = max_model_len
        self.summary_rng = rng if summary_rng is None else summary_rng

    def lognormal(self, median: float, sigma: float, rng: np.random.Generator | None = None) -> float:
        return float((self.rng if rng is None else rng).lognormal(np.log(max(median, 1e-9)), sigma))

    def tokens(
        self, median: float, sigma: float, low: int, high: int, rng: np.random.Generator | None = None
    ) -> int:
        return int(np.clip(round(self.lognormal(median, sigma, rng)), low, high))

    def summary(self) -> int:
        """A compaction summary's length; at most `summary_max`, and at most a fifth of the max model
        length (a summary is much shorter than the context it replaces, so tiny caps keep working)."""
        p = self.p
        cap = self.max_model_len
        high = p.summary_max if cap is None else min(p.summary_max, summary_cap(cap))
        return self.tokens(p.output_median, p.output_sigma, 1, high, self.summary_rng)

    def think(self) -> float:
        p = self.p
        if self.rng.random() < p.long_pause_p:
            return min(self.lognormal(p.long_pause_median_s, p.long_pause_sigma), p.max_pause_s)
        return min(self.lognormal(p.think_median_s, p.think_sigma), p.max_pause_s)

    def step(self) -> int:
        p = self.p
        if self.rng.random() < p.small_step_p:
            return self.tokens(p.small_step_median, p.small_step_sigma, 1, 200_000)
        return self.tokens(p.big_step_median, p.big_step_sigma, 1, 200_000)

    def episode(self, base: int) -> list[_Call]:
        """Calls of one uncapped episode; the first call's `appended` is the first message (after `base`).

        The episode's length is set here, whatever `max_model_len`: calls grow the context by the previous
        output plus a step until it reaches a drawn final size, and that call writes the long answer.
        """
        p = self.p
        final_out = self.tokens(p.final_output_median, p.final_output_sigma, 1, 32_768)
        target = int(self.rng.integers(p.final_context_low, p.final_context_high + 1))
        ctx = base + self.tokens(p.first_message_median, p.first_message_sigma, 1, 100_000)
        appended, outputs, pauses = [ctx - base], [], [0.0]
        while ctx < target:
            outputs.append(self.tokens(p.output_median, p.output_sigma, 1, 16_384))
            grown = min(ctx + outputs[-1] + self.step(), target)
            appended.append(grown - ctx)
            pauses.append(self.think())
            ctx = grown
        outputs.append(final_out)
        return [_Call(a, o, t, k) for k, (a, o, t) in enumerate(zip(appended, outputs, pauses, strict=True))]

    def fit(self, calls: list[_Call], base: int) -> list[_Call]:
        """`calls` as sent under `max_model_len`: compaction calls added where the context would not fit.

        Each ordinary call leaves room for the next summary (`reserve`), so a compaction call, whose prompt
        is the previous prompt plus its reply, always fits. After a compaction the context is `base +
        summary`, the pending tool result follows it, and the call goes out at once (pause 0; the tool time
        was spent before the compaction). A tool result that still does not fit is cut (as Claude Code cuts
        long tool output), then, only if `base + summary` alone leaves too little, the output.
        """
        cap = self.max_model_len
        if cap is None:
            return calls
        fitted: list[_Call] = []
        prev_prompt, prev_out, summary = base, 0, self.summary()
        last = len(calls) - 1
        for c in calls:
            reserve = 0 if c.index == last else summary
            appended, pause, restart = c.appended, c.pause_s, 0
            if c.index > 0 and prev_prompt + appended + c.output + reserve > cap:
                reply = min(prev_out, appended)
                fitted.append(_Call(reply, summary, pause, c.index, compaction=True))
                prev_prompt, appended, pause, restart = base + summary, appended - reply, 0.0, summary
                summary = self.summary()
                reserve = 0 if c.index == last else summary
            appended = max(0, min(appended, cap - prev_prompt - c.output - reserve))
            output = max(1, min(c.output, cap - prev_prompt - appended - reserve))
            fitted.append(_Call(appended, output, pause, c.index, summary=restart))
            prev_prompt, prev_out = prev_prompt + appended, output
        return fitted


@dataclass(frozen=True)
class _Plan:
    profile: AgentProfile
    duration_s: float
    stagger_s: float
    warm_start: bool
    common_prefix_tokens: int
    max_model_len: int | None
    seed: int
    priority: int
    vocab_size: int


def coding_agents(
    n: int,
    duration_s: float,
    seed: int,
    *,
    profile: AgentProfile | None = None,
    max_model_len: int | None = None,
    stagger_s: float = 30.0,
    warm_start: bool = True,
    common_prefix_tokens: int = 0,
    priority: int = DEFAULT_PRIORITY["agent"],
    vocab_size: int = DEFAULT_VOCAB,
) -> Workload:
    """`n` coding-agent sessions (`agent/0` ...) whose calls are issued within `duration_s` of nominal time.

    Agent i starts at a uniform time in `[0, stagger_s)`. With `warm_start`, it joins its first episode at a
    random call (so the run starts with grown contexts, as in a replay caught mid-session). Nominal time, used
    only to stop at `duration_s` and to set `arrival_s`, charges each call `nominal_call_s + output *
    nominal_s_per_output_token`; a driver issues the next call when the real reply completes plus the pause.
    `common_prefix_tokens` tokens at the head of every prompt are the same for all agents (a shared system
    prompt); the rest of each agent's base is its own. With `max_model_len`, episodes keep their uncapped
    length and the session compacts instead of passing it (see the module docstring); `base` is clipped to
    `AgentProfile.base_high(max_model_len)`. Every request then has prompt + max_tokens <= max_model_len.
    """
    if n < 1 or not duration_s > 0 or stagger_s < 0 or common_prefix_tokens < 0:
        raise ValueError(
            "coding_agents needs n >= 1, duration_s > 0, stagger_s >= 0, common_prefix_tokens >= 0"
        )
    plan = _Plan(
        profile or AgentProfile(),
        duration_s,
        stagger_s,
        warm_start,
        common_prefix_tokens,
        max_model_len,
        seed,
        priority,
        vocab_size,
    )
    rng = np.random.default_rng([seed, 0xA6E27])
    return Workload(f"agents-{n}", tuple(_agent(i, plan, rng) for i in range(n)), seed)


def _agent(i: int, plan: _Plan, rng: np.random.Generator) -> Session:
    prof = plan.profile
    # Summaries come from their own stream, so they do not shift the draws of the agent's episodes: under
    # any cap, agent 0's calls are those it makes without one (later agents' streams start where the
    # previous agent, which made fewer calls within `duration_s`, left off).
    draw = _AgentDraw(prof, rng, plan.max_model_len, np.random.default_rng([plan.seed, 0x5C0AC7, i]))
    sid, key = f"agent/{i}", f"agents/{plan.seed}/{i}"
    start = float(rng.uniform(0, plan.stagger_s)) if plan.stagger_s > 0 else 0.0
    high = prof.base_high(plan.max_model_len)
    base = max(
        plan.common_prefix_tokens + 1,
        draw.tokens(prof.base_median, prof.base_sigma, min(_BASE_LOW, high), high),
    )
    head: list[Span] = []
    if plan.common_prefix_tokens:
        head.append(prefix_group_span("agent-system", plan.common_prefix_tokens))
    head.append(unique_span(f"{key}/base", base - plan.common_prefix_tokens))
    requests: list[WorkloadRequest] = []
    issue, done, episode = start, start, 0
    while issue < plan.duration_s:
        episode_calls = draw.episode(base)
        first_pause = draw.lognormal(prof.episode_pause_median_s, prof.episode_pause_sigma)
        skip = int(rng.integers(0, len(episode_calls))) if plan.warm_start and episode == 0 else 0
        spans = list(head)
        for k, call in enumerate(draw.fit(episode_calls, base)):
            if call.summary:
                spans = [*head, unique_span(f"{key}/e{episode}/{k}/summary", call.summary)]
            spans.append(unique_span(f"{key}/e{episode}/{k}", call.appended))
            if call.index < skip or (call.compaction and call.index == skip):
                continue
            pause = start if not requests else min(first_pause, prof.max_pause_s) if k == 0 else call.pause_s
            issue = start if not requests else done + pause
            if issue >= plan.duration_s:
                break
            rid = f"{sid}/{len(requests)}{COMPACTION_SUFFIX if call.compaction else ''}"
            requests.append(_request(rid, sid, tuple(spans), call, pause, issue, plan))
            done = issue + prof.nominal_call_s + call.output * prof.nominal_s_per_output_token
        episode += 1
    return Session(sid, "agent", start, tuple(requests))


def is_compaction(request: WorkloadRequest) -> bool:
    """Whether a request of `coding_agents` is a compaction call (its output is the summary)."""
    return request.id.endswith(COMPACTION_SUFFIX)


def _request(
    rid: str, sid: str, spans: tuple[Span, ...], call: _Call, pause: float, issue: float, plan: _Plan
) -> WorkloadRequest:
    n_prompt, max_tokens = clip_to_model_len(prompt_length(spans), call.output, plan.max_model_len)
    return WorkloadRequest(
        id=rid,
        session_id=sid,
        cls="agent",
        priority=plan.priority,
        prompt=head_spans(spans, n_prompt),
        max_tokens=max_tokens,
        pause_before_s=pause,
        arrival_s=issue,
        vocab_size=plan.vocab_size,
    )
