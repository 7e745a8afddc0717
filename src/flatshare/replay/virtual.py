"""The virtual-time driver: a workload against one or several simulated engines.

Sessions issue their requests by `Session.issue_s` (the previous reply complete, spoken for voice, plus
the pause). Engines advance in lockstep: the driver always steps the engine whose clock is furthest
behind, after issuing every request due by then, so a request never arrives in an engine's past by more
than one step. Which engine serves a request is the `route` function's choice (default: a session stays
on one engine, so its prefix cache stays warm).

Requests reach their engines through one edge (`flatshare.replay.edges`), so the driver has one loop:
straight to them, or with `gate` (a gateway-side baseline, `flatshare.policy.gates.make_gate`) through the
gate, which holds, releases, aborts and resubmits them and may change their `max_tokens`
(`flatshare.replay.virtual_gate` says how, and how aborted attempts are recorded); its counters come back
as `VirtualRun.gate_counters`.

With `hint_lead_s`, every request of a spoken (voice) session is preceded by an arrival hint sent
`hint_lead_s` seconds before it, as a voice agent sends one when its voice-activity detector reports the
end of the caller's speech and the turn follows once the final transcript is in
(`flatshare.scheduler.hint`): a one-token request of the turn's priority whose `extra_args` carry
`{"flatshare_hint": "turn"}`, and with `hint_in_s` also `{"flatshare_hint_in_s": hint_in_s}` (when the
voice agent expects its turn: its recogniser's usual delay, a setting of the agent, not this turn's). It
knows nothing of the future: the turn's send time is already fixed when the caller starts speaking. Hints
are not in the run's records.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from flatshare.listen.voice import VoicePipeline
from flatshare.policy.gates.core import Gate
from flatshare.replay.edges import DirectEdge, Edge
from flatshare.replay.virtual_gate import GateDriver
from flatshare.runfiles.records import ReplayRecord, first_sentence_times
from flatshare.runfiles.samples import EngineSample
from flatshare.runfiles.sim_records import RequestRecord
from flatshare.scheduler.hint import HINT_IN_KEY, HINT_KEY, HINT_TURN
from flatshare.sim.engine import SimEngine
from flatshare.sim.requests import SimRequest
from flatshare.sim.step_ledger import summed
from flatshare.workloads.model import Session, Workload, WorkloadRequest

Route = Callable[[WorkloadRequest, Sequence[SimEngine]], int]


def sticky_route(request: WorkloadRequest, engines: Sequence[SimEngine]) -> int:
    """Keep a session on one engine (a stable hash of its id)."""
    return sum(request.session_id.encode()) % len(engines)


@dataclass(frozen=True)
class VirtualRun:
    """What a virtual-time run produced, a plain value (no live engine): its records, the engines'
    samples, and the engines' totals."""

    records: list[ReplayRecord]
    samples: list[tuple[str, EngineSample]]
    preemptions: int
    """Summed over the engines, as `steps` and `scheduler_counters` (each counter as an integer)."""
    steps: int
    virtual_s: float
    """The latest engine clock at the end."""
    scheduler_counters: dict[str, int]
    gate_counters: dict[str, float] = field(default_factory=dict)
    """The gate's counters (`Gate.counters`) at the end of the run; empty without a gate."""
    step_ledger: dict[str, float] = field(default_factory=dict)
    """Where the engines' time went over the run's duration (`flatshare.sim.step_ledger`), summed."""
    kv_ledger: dict[str, float] = field(default_factory=dict)
    """Where the engines' KV cache went over the run's duration (`flatshare.sim.kv_ledger`), summed."""

    def totals(self) -> dict[str, Any]:
        """`preemptions`, `steps`, `virtual_s`, `scheduler_counters`, `step_ledger`, `kv_ledger`: the engine
        facts a run folder keeps."""
        return {
            "preemptions": self.preemptions,
            "steps": self.steps,
            "virtual_s": self.virtual_s,
            "scheduler_counters": self.scheduler_counters,
            "step_ledger": self.step_ledger,
            "kv_ledger": self.kv_ledger,
        }


def _finished_run(
    records: list[ReplayRecord], engines: Sequence[SimEngine], gate_counters: dict[str, float]
) -> VirtualRun:
    counters: dict[str, int] = {}
    for engine in engines:
        for key, value in engine.result().scheduler_counters.items():
            counters[key] = counters.get(key, 0) + int(value)
    return VirtualRun(
        records,
        _samples(engines),
        preemptions=sum(e.preemptions for e in engines),
        steps=sum(e.steps for e in engines),
        virtual_s=max(e.now for e in engines),
        scheduler_counters=counters,
        gate_counters=gate_counters,
        step_ledger=summed(e.ledger.to_json() for e in engines),
        kv_ledger=summed(e.kv_ledger.to_json() for e in engines),
    )


class _Issuer:
    """The heap of sessions' next requests, by issue time."""

    def __init__(
        self,
        workload: Workload,
        until_s: float | None,
        on_speech: Callable[[float, str], None],
        hint_lead_s: float | None = None,
        pipeline: VoicePipeline | None = None,
    ) -> None:
        self.sessions = {s.id: s for s in workload.sessions}
        self.pipeline = pipeline
        self.on_speech = on_speech  # (when a caller starts speaking, session id)
        self.until_s = until_s
        self.hint_lead_s = hint_lead_s
        self.hints: list[tuple[float, int, WorkloadRequest]] = []
        self.heap: list[tuple[float, int, str, int]] = []
        self.position: dict[str, tuple[str, int]] = {}  # request id -> (session id, index)
        self._seq = 0
        for session in workload.sessions:
            self._push(session, 0, session.issue_s(0))

    def _push(self, session: Session, k: int, t: float) -> None:
        if k >= len(session.requests) or (self.until_s is not None and t > self.until_s):
            return
        request = session.requests[k]
        spoken = session.speech_tokens_per_s is not None
        send = t
        if spoken and self.pipeline is not None and self.pipeline.asr_final_spread:
            # the recogniser's delay for this turn, about the median the session's timing assumes
            send = max(t + self.pipeline.asr_final_for(request.id) - self.pipeline.asr_final_s, 0.0)
        heapq.heappush(self.heap, (send, self._seq, session.id, k))
        self._seq += 1
        if self.hint_lead_s is not None and spoken:
            speech_start = t - request.pause_before_s if k > 0 else 0.0
            heapq.heappush(self.hints, (max(t - self.hint_lead_s, speech_start, 0.0), self._seq, request))
            self._seq += 1

    def next_time(self) -> float | None:
        return self.heap[0][0] if self.heap else None

    def next_hint_time(self) -> float | None:
        return self.hints[0][0] if self.hints else None

    def pop_hint(self) -> tuple[float, WorkloadRequest]:
        t, _, request = heapq.heappop(self.hints)
        return t, request

    def pop(self) -> tuple[float, WorkloadRequest]:
        t, _, session_id, k = heapq.heappop(self.heap)
        request = self.sessions[session_id].requests[k]
        self.position[request.id] = (session_id, k)
        return t, request

    def finished(self, record: RequestRecord, request: WorkloadRequest) -> None:
        session_id, k = self.position[request.id]
        session = self.sessions[session_id]
        if k + 1 >= len(session.requests):
            return
        sentence = first_sentence_times(record.token_times_s, request.first_sentence_tokens)
        first_sentence = sentence[-1] if sentence else None
        done = record.finish_s if record.finish_s is not None else record.arrival_s
        t = session.issue_s(k + 1, done, len(record.token_times_s), first_sentence)
        self._push(session, k + 1, t)
        spoken = session.speech_tokens_per_s is not None
        if spoken and (self.until_s is None or t <= self.until_s):
            self.on_speech(t - session.requests[k + 1].pause_before_s, session_id)


def run_virtual(
    workload: Workload,
    engines: Sequence[SimEngine],
    route: Route = sticky_route,
    until_s: float | None = None,
    on_progress: Callable[[float], None] | None = None,
    stop_s: float | None = None,
    gate: Gate | None = None,
    hint_lead_s: float | None = None,
    hint_in_s: float | None = None,
    pipeline: VoicePipeline | None = None,
) -> VirtualRun:
    """Replay `workload` on `engines` in virtual time; no request is issued after `until_s` (the window of
    the engines' step ledgers too), and no engine steps past `stop_s` (requests unfinished then are
    recorded as failed: "run ended"). `gate`: a gateway-side baseline between the sessions and the engines;
    `hint_lead_s`: send arrival hints, `hint_in_s`: saying their turn is due in that many seconds (module
    docstring; not with a gate). `pipeline`: the voice pipeline whose recogniser's delay varies the
    spoken turns' send times (its median is the workload's; None or no spread: unchanged)."""
    if hint_lead_s is not None and (gate is not None or hint_lead_s < 0):
        raise ValueError("hint_lead_s must be >= 0, and hints are not sent through a gate")
    if hint_in_s is not None and (hint_lead_s is None or hint_in_s < 0):
        raise ValueError("hint_in_s must be >= 0 and needs hint_lead_s")
    edge: Edge = GateDriver(gate, engines) if gate is not None else DirectEdge(engines)
    for engine in engines:
        engine.ledger.until_s = engine.kv_ledger.until_s = until_s
    issuer = _Issuer(workload, until_s, edge.speech_starts, hint_lead_s, pipeline)
    while True:
        busy = [e for e in engines if e.has_work() and (stop_s is None or e.now < stop_s)]
        clock = min((e.now for e in busy), default=None)
        due = issuer.next_time()
        wake = edge.next_time()
        hint = issuer.next_hint_time()
        if hint is not None and (clock is None or hint <= clock) and (due is None or hint <= due):
            t, request = issuer.pop_hint()
            engines[route(request, engines)].submit(_hint_request(request, t, hint_in_s))
            continue
        if due is not None and (clock is None or due <= clock) and (wake is None or due <= wake):
            t, request = issuer.pop()
            edge.issue(t, request, route(request, engines), tool_returned=_tool_returned(issuer, request))
            continue
        if wake is not None and (clock is None or wake <= clock):
            edge.wake(wake)
            continue
        if clock is None:
            break
        engine = min(busy, key=lambda e: e.now)
        report = engine.step()
        if report is None:
            continue
        for request, record in edge.stepped(engine, report):
            issuer.finished(record, request)
        if on_progress is not None:
            on_progress(engine.now)
    now = max((e.now for e in engines), default=0.0)
    records = sorted(edge.records(now), key=lambda r: (r.send_s, r.id))
    return _finished_run(records, engines, edge.counters())


HINT_PROMPT = (11, 12, 13, 14)  # a tiny prompt: a hint is one short request, its content unused


def _hint_request(turn: WorkloadRequest, t: float, in_s: float | None = None) -> SimRequest:
    """The arrival hint for `turn`, sent at `t`: one output token, the turn's priority; with `in_s`, saying
    the turn is expected that many seconds later."""
    extra_args: dict[str, Any] = {HINT_KEY: HINT_TURN}
    if in_s is not None:
        extra_args[HINT_IN_KEY] = in_s
    return SimRequest(f"{turn.id}/hint", t, HINT_PROMPT, 1, turn.priority, "hint", extra_args=extra_args)


def _tool_returned(issuer: _Issuer, request: WorkloadRequest) -> bool:
    """Whether this request follows a tool call of an agent session (any session whose replies are not
    spoken, past its first request)."""
    session_id, k = issuer.position[request.id]
    return k > 0 and issuer.sessions[session_id].speech_tokens_per_s is None


def _samples(engines: Sequence[SimEngine]) -> list[tuple[str, EngineSample]]:
    return [(f"sim{i}", s) for i, e in enumerate(engines) for s in e.samples]
