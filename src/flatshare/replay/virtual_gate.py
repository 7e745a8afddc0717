"""A gateway-side baseline (`flatshare.policy.gates`) in the virtual-time driver: the edge between
a `Gate` and the simulated engines, as `flatshare.gateway.gating` is the edge in the real gateway.

Each request reaches the gate when its session issues it (its record's `send_s` stays that time) and
goes to its engine when the gate sends it, with the `max_tokens` the gate chose; the gate is told of its
first token and of every token after (`Gate.progress`; a voice turn's `first_sentence_tokens` come from
the workload). The gate sees each engine's state fresh at every poll (KV use, running and waiting
requests, and requests sent but not yet admitted as `unseen`), and is polled after every issue, every
engine step and at its own wake times.
Events: a voice session's caller starts speaking when the previous reply has been spoken
(`Session.issue_s` minus the next request's `pause_before_s`, which is the caller's speech); an agent's
tool call comes back as its next request is issued (`pause_before_s` is the tool's time).

An abort (`SimEngine.abort`, vLLM's own `finish_requests(..., FINISHED_ABORTED)`) ends that attempt; a
resubmitted request goes to the engine under a new id (`<id>~<n>`) and its final attempt is written
under the request's own id. Each aborted attempt is written as a record of its own: id
`<id>/aborted-<n>`, status `failed`, error naming the abort, `send_s` when that attempt was sent. A
request still held when the run ends is written `failed` ("held in the gateway when the run ended").
With a gate, `wait_s` gains the part `gateway`: the time from `send_s` to the final attempt's send.
"""

from __future__ import annotations

import dataclasses
import heapq
from collections.abc import Sequence
from dataclasses import dataclass, field

from flatshare.policy.gates.core import Decisions, Gate, GateEvent, GateRequest
from flatshare.policy.load import BackendLoad
from flatshare.replay.ledger import new_record
from flatshare.runfiles.records import ReplayRecord
from flatshare.runfiles.sim_records import RequestRecord
from flatshare.sim.engine import SimEngine, StepReport
from flatshare.sim.requests import SimRequest
from flatshare.workloads.model import WorkloadRequest

HELD_AT_END = "held in the gateway when the run ended"


def engine_name(index: int) -> str:
    return f"sim{index}"


@dataclass
class _Attempt:
    engine_id: str
    engine: int
    sent_s: float
    computed: int = 0


@dataclass
class _Request:
    request: WorkloadRequest
    issue_s: float
    engine: int
    attempts: list[_Attempt] = field(default_factory=list)
    aborted: list[_Attempt] = field(default_factory=list)
    streaming: bool = False
    tokens: int = 0


class GateDriver:
    """Feeds a gate from the driver and carries out its decisions on the engines: the gated
    `flatshare.replay.edges.Edge`."""

    def __init__(self, gate: Gate, engines: Sequence[SimEngine]) -> None:
        self.gate = gate
        self.engines = engines
        self.requests: dict[str, _Request] = {}
        self.by_engine_id: dict[str, str] = {}
        self.unseen: list[set[str]] = [set() for _ in engines]
        self.events: list[tuple[float, int, GateEvent]] = []
        self._seq = 0
        self.last_poll_s = 0.0

    # -- time ------------------------------------------------------------------------------------------
    def next_time(self) -> float | None:
        """The next event or gate wake-up."""
        times = [self.events[0][0]] if self.events else []
        wake = self.gate.next_wake_s(self.last_poll_s)
        if wake is not None:
            times.append(wake)
        return min(times) if times else None

    def wake(self, t: float) -> None:
        """Deliver the events due by `t`, then poll."""
        while self.events and self.events[0][0] <= t:
            _, _, event = heapq.heappop(self.events)
            self.gate.event(event, t)
        self.poll(t)

    def speech_starts(self, t: float, session_id: str) -> None:
        heapq.heappush(self.events, (t, self._seq, GateEvent("caller_speaking", session_id)))
        self._seq += 1

    # -- the request stream ----------------------------------------------------------------------------
    def issue(self, t: float, request: WorkloadRequest, index: int, tool_returned: bool) -> None:
        if tool_returned:
            self.gate.event(GateEvent("tool_returned", request.session_id, engine_name(index)), t)
        self.requests[request.id] = _Request(request, t, index)
        gate_request = GateRequest(
            request.id,
            engine_name(index),
            request.priority,
            request.prompt_tokens,
            request.max_tokens,
            request.session_id,
            first_sentence_tokens=request.first_sentence_tokens,
        )
        self.gate.arrive(gate_request, t)
        self.poll(t)

    def stepped(self, engine: SimEngine, report: StepReport) -> list[tuple[WorkloadRequest, RequestRecord]]:
        """Tell the gate what a step produced and poll; the requests that finished (ok), with the records
        of their final attempts."""
        for engine_id, n in report.scheduled.items():
            if self._current(engine_id) is not None:
                self.requests[self.by_engine_id[engine_id]].attempts[-1].computed += n
        for engine_id, n in report.tokens:
            entry = self._current(engine_id)
            if entry is None:
                continue
            if not entry.streaming:
                entry.streaming = True
                self.gate.first_token(entry.request.id, engine.now)
            entry.tokens += n
            self.gate.progress(entry.request.id, entry.tokens, engine.now)
        finished = [self.by_engine_id[i] for i in report.finished if self._current(i) is not None]
        for request_id in finished:
            self.gate.finished(request_id, engine.now)
        self.poll(engine.now)
        return [(self.requests[i].request, engine.records[self._live_id(i)]) for i in finished]

    def _live_id(self, request_id: str) -> str:
        engine_id = self.engine_id(request_id)
        if engine_id is None:
            raise AssertionError(f"{request_id!r} finished without a live attempt")
        return engine_id

    def _current(self, engine_id: str) -> _Request | None:
        """The request whose live attempt `engine_id` is (None for an aborted attempt)."""
        request_id = self.by_engine_id.get(engine_id)
        if request_id is None or self.engine_id(request_id) != engine_id:
            return None
        return self.requests[request_id]

    def poll(self, t: float) -> None:
        self.last_poll_s = max(self.last_poll_s, t)
        decisions = self.gate.poll(t, self._loads())
        self._apply(t, decisions)

    def _loads(self) -> dict[str, BackendLoad]:
        loads = {}
        for index, engine in enumerate(self.engines):
            unseen = self.unseen[index]
            unseen.difference_update([i for i in unseen if i in engine.records])
            running, waiting = engine.scheduler.get_request_counts()
            usage = engine.scheduler.get_kv_cache_usage()
            loads[engine_name(index)] = BackendLoad(
                engine_name(index),
                kv_usage=usage,
                running=running,
                waiting=waiting,
                scrape_age_s=0.0,
                stale=False,
                unseen=len(unseen),
            )
        return loads

    def _apply(self, t: float, decisions: Decisions) -> None:
        for request_id in decisions.abort:
            entry = self.requests[request_id]
            attempt = entry.attempts[-1]
            if not self.engines[attempt.engine].abort(attempt.engine_id):
                raise AssertionError(f"the gate aborted {request_id!r}, which its engine no longer holds")
            self.unseen[attempt.engine].discard(attempt.engine_id)
            entry.aborted.append(attempt)
            self.gate.aborted(request_id, t, attempt.computed)
        for send in decisions.send:
            entry = self.requests[send.request_id]
            request = entry.request
            n = len(entry.attempts)
            engine_id = request.id if n == 0 else f"{request.id}~{n}"
            max_tokens = request.max_tokens if send.max_tokens is None else send.max_tokens
            entry.attempts.append(_Attempt(engine_id, entry.engine, t))
            self.by_engine_id[engine_id] = request.id
            self.unseen[entry.engine].add(engine_id)
            # No `first_sentence_tokens` here, unlike `DirectEdge.issue`: the simulated model of a gated run
            # samples no sentence-end token, so make-room's `sentence_end_token_ids` never fire behind a gate
            # (no condition combines them today; kept as it was so saved runs stay the same).
            self.engines[entry.engine].submit(
                SimRequest(engine_id, t, request.prompt_token_ids, max_tokens, request.priority, request.cls)
            )

    def counters(self) -> dict[str, float]:
        return dict(self.gate.counters)

    # -- records ---------------------------------------------------------------------------------------
    def engine_id(self, request_id: str) -> str | None:
        """The engine id of the request's last attempt (None if never sent, or its last was aborted)."""
        entry = self.requests[request_id]
        if not entry.attempts or (entry.aborted and entry.aborted[-1] is entry.attempts[-1]):
            return None
        return entry.attempts[-1].engine_id

    def records(self, now: float) -> list[ReplayRecord]:
        """Every request's record, and one per aborted attempt (module docstring)."""
        out = []
        for request_id, entry in self.requests.items():
            request = entry.request
            session, name, sentence = (
                request.session_id,
                engine_name(entry.engine),
                request.first_sentence_tokens,
            )
            engine = self.engines[entry.engine]
            # The run ends at `now`; an engine that idled to its end without a step may be behind it (an
            # unfinished request's record ends at the run's end, never before it was sent).
            end = max(now, engine.now)
            for k, attempt in enumerate(entry.aborted, start=1):
                record = engine.record(attempt.engine_id).to_record(
                    session_id=session, engine=name, now=end, first_sentence_tokens=sentence
                )
                record.id = f"{request_id}/aborted-{k}"
                record.error = (
                    f"aborted by the gateway ({self.gate.name}) before its first token; resubmitted"
                )
                out.append(record)
            engine_id = self.engine_id(request_id)
            if engine_id is None:
                out.append(_held_record(request, entry.issue_s, max(now, entry.issue_s), name))
                continue
            # engine.record: an attempt sent as the run ended may not have reached the scheduler
            record = engine.record(engine_id).to_record(
                session_id=session, engine=name, now=end, first_sentence_tokens=sentence
            )
            record.id, record.send_s = request_id, entry.issue_s
            if record.wait_s is not None:
                record.wait_s["gateway"] = round(entry.attempts[-1].sent_s - entry.issue_s, 6)
            out.append(record)
        return out


def _held_record(request: WorkloadRequest, issue_s: float, end_s: float, engine: str) -> ReplayRecord:
    """A request the gate still held when the run ended: never sent, recorded as failed."""
    return dataclasses.replace(
        new_record(request, engine, issue_s), end_s=end_s, status="failed", error=HELD_AT_END
    )
