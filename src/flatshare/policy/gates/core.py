"""What every gateway-side baseline sees and says, and the bookkeeping they share. Pure: no I/O, no
clock, no asyncio; the caller passes the time (seconds, any origin) into every call.

The edges drive a `Gate` the same way: the virtual-time driver (`flatshare.replay.virtual`) with virtual
seconds and the simulated engines' state, the real gateway (`flatshare.gateway.gating`) with monotonic
seconds and its scrapes of the backends' /metrics.

- `arrive(request, now)`: a client's request reached the gateway, its backend already chosen by the
  routing policy. It is *held* until a `poll` sends it.
- `poll(now, loads)`: what to do now: requests to send (each with the `max_tokens` to send it with, or
  None to keep the client's) and requests in flight to abort. Only `poll` changes what is sent.
- `first_token(id, now)`, `progress(id, tokens, now)`, `finished(id, now)`: what came back (`progress`:
  the output tokens so far, as far as the edge can count them). `finished` covers every end (ok,
  failed, the client gone) and forgets the request.
- `aborted(id, now, computed_tokens)`: the edge closed an aborted request's upstream stream before its
  first token; the request is held again, to be resubmitted. If the first token came first, the edge
  calls `first_token` instead (the abort was too late; counted).
- `event(event, now)`: a signal from outside the request stream (a caller starting to speak, an agent's
  tool call coming back).
- `next_wake_s(now)`: the earliest time after `now` at which a `poll` may act without any other call (a
  lease expiring, a paced slot opening); None when only a call can change anything.

Requests are classed by vLLM priority (lower is more important; `Classes`): voice turns are
`priority <= voice_max_priority`, agents `priority >= agent_min_priority`, anything between is "other"
(never held by the agent rules). Counters (`Gate.counters`, flat name -> number, every key present
from the start so a mechanism that never fires shows 0) are shared by all gates (`COMMON_COUNTERS`) plus
each mechanism's own.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from flatshare.policy.classes import Classes
from flatshare.policy.gates.sessions import SessionLimits, SessionMap
from flatshare.policy.load import BackendLoad

HELD, SENT, STREAMING, ABORTING = "held", "sent", "streaming", "aborting"
EVENT_KINDS = ("caller_speaking", "tool_returned")
COMMON_COUNTERS = (
    "arrived",  # requests the gate saw
    "sent",  # sends (a resubmitted request counts once per send)
    "held_voice",  # requests that waited at least one poll, by class
    "held_agent",
    "held_other",
    "max_held",  # most requests waiting in the gate at once
    "max_hold_s",  # longest wait of one request in the gate (one stretch)
    "events_caller_speaking",
    "events_tool_returned",
)


@dataclass(frozen=True)
class GateRequest:
    """A request as a gate sees it. `backend`: where routing sent it. `max_tokens`: the client's (None:
    not given). `abortable`: whether the edge can tell it has produced no token yet (a stream).
    `first_sentence_tokens`: for a voice turn, the output tokens its first speakable sentence takes, when
    known (the workload knows; a gateway client may say so in a header)."""

    id: str
    backend: str
    priority: int
    prompt_tokens: int
    max_tokens: int | None = None
    session_id: str | None = None
    abortable: bool = True
    first_sentence_tokens: int | None = None


@dataclass(frozen=True)
class GateEvent:
    """`caller_speaking`: a voice session's caller started speaking (its next turn will follow);
    `tool_returned`: an agent session's tool call came back (its next request will follow). `backend`:
    where the session's requests go (None: the gate uses the backend of the session's last request)."""

    kind: str
    session_id: str
    backend: str | None = None

    def __post_init__(self) -> None:
        if self.kind not in EVENT_KINDS:
            raise ValueError(f"event kind must be one of {', '.join(EVENT_KINDS)}, got {self.kind!r}")
        if not self.session_id:
            raise ValueError("an event needs a session id")


@dataclass(frozen=True)
class Send:
    request_id: str
    max_tokens: int | None


@dataclass(frozen=True)
class Decisions:
    send: tuple[Send, ...] = ()
    abort: tuple[str, ...] = ()


@dataclass
class Tracked:
    """A request the gate knows, from arrival to `finished`."""

    request: GateRequest
    seq: int
    cls: str
    state: str = HELD
    held_since_s: float = 0.0
    counted_held: bool = False
    sent_s: float | None = None
    tokens: int = 0
    aborts: int = 0
    marks: set[str] = field(default_factory=set)


class Gate(ABC):
    """The shared bookkeeping (module docstring); a mechanism implements `_decide`."""

    name = ""
    COUNTERS: tuple[str, ...] = ()

    def __init__(self, classes: Classes) -> None:
        self.classes = classes
        self.requests: dict[str, Tracked] = {}
        self.session_backend = SessionMap()
        self.counters: dict[str, float] = dict.fromkeys((*COMMON_COUNTERS, *self.COUNTERS), 0)
        self._seq = 0

    def limit_sessions(self, limits: SessionLimits) -> None:
        """Remember sessions' backends within `limits` (before the first arrival; sessions.py)."""
        self.session_backend = SessionMap(limits)

    # -- what the edge tells the gate ----------------------------------------------------------------
    def arrive(self, request: GateRequest, now: float) -> None:
        if request.id in self.requests:
            raise ValueError(f"request {request.id!r} is already in the gate")
        tracked = Tracked(request, self._seq, self.classes.of(request.priority), held_since_s=now)
        self._seq += 1
        self.requests[request.id] = tracked
        if request.session_id is not None:
            self.session_backend.set(request.session_id, request.backend, now)
        self.counters["arrived"] += 1
        self._on_arrive(tracked, now)

    def first_token(self, request_id: str, now: float) -> None:
        tracked = self.requests.get(request_id)
        if tracked is None or tracked.state == STREAMING:
            return
        if tracked.state == HELD:
            raise ValueError(f"request {request_id!r} got a token while held in the gate")
        if tracked.state == ABORTING:
            self._late_abort(tracked)
        tracked.state = STREAMING
        tracked.tokens = max(tracked.tokens, 1)
        self._on_first_token(tracked, now)

    def progress(self, request_id: str, tokens: int, now: float) -> None:
        """The request has produced `tokens` output tokens so far (after its `first_token`)."""
        tracked = self.requests.get(request_id)
        if tracked is None or tracked.state != STREAMING or tokens <= tracked.tokens:
            return
        tracked.tokens = tokens
        self._on_progress(tracked, now)

    def finished(self, request_id: str, now: float) -> None:
        tracked = self.requests.pop(request_id, None)
        if tracked is not None:
            self._on_finished(tracked, now)

    def aborted(self, request_id: str, now: float, computed_tokens: int | None = None) -> None:
        tracked = self.requests.get(request_id)
        if tracked is None or tracked.state != ABORTING:
            raise ValueError(f"request {request_id!r} was not being aborted")
        tracked.state = HELD
        tracked.tokens = 0
        tracked.held_since_s = now
        tracked.counted_held = False
        tracked.aborts += 1
        self._on_aborted(tracked, now, computed_tokens)

    def event(self, event: GateEvent, now: float) -> None:
        self.counters[f"events_{event.kind}"] += 1
        backend = event.backend or self.session_backend.get(event.session_id, now)
        if backend is not None:
            self._on_event(event, backend, now)

    def poll(self, now: float, loads: Mapping[str, BackendLoad]) -> Decisions:
        """The mechanism's decisions now; requests it sends leave the held state, requests it aborts
        wait for the edge's `aborted` or `first_token`."""
        decisions = self._decide(now, loads)
        for send in decisions.send:
            tracked = self.requests[send.request_id]
            if tracked.state != HELD:
                raise AssertionError(f"{self.name}: sent {send.request_id!r} in state {tracked.state}")
            self.counters["max_hold_s"] = max(self.counters["max_hold_s"], now - tracked.held_since_s)
            tracked.state, tracked.sent_s = SENT, now
            self.counters["sent"] += 1
        for request_id in decisions.abort:
            tracked = self.requests[request_id]
            if tracked.state != SENT:
                raise AssertionError(f"{self.name}: aborted {request_id!r} in state {tracked.state}")
            tracked.state = ABORTING
        held = self.held()
        for tracked in held:
            if not tracked.counted_held:
                tracked.counted_held = True
                self.counters[f"held_{tracked.cls}"] += 1
        self.counters["max_held"] = max(self.counters["max_held"], len(held))
        return decisions

    def next_wake_s(self, now: float) -> float | None:
        """The earliest time after `now` at which a `poll` may act with nothing else happening."""
        return None

    # -- views -----------------------------------------------------------------------------------------
    def held(self) -> list[Tracked]:
        """Requests waiting in the gate, oldest first (by arrival, so a resubmitted one goes first)."""
        return sorted((t for t in self.requests.values() if t.state == HELD), key=lambda t: t.seq)

    def in_flight(self, backend: str, cls: str | None = None) -> list[Tracked]:
        """Requests sent to `backend` and not finished (of class `cls`, or all)."""
        return [
            t
            for t in self.requests.values()
            if t.state != HELD and t.request.backend == backend and (cls is None or t.cls == cls)
        ]

    # -- hooks -----------------------------------------------------------------------------------------
    @abstractmethod
    def _decide(self, now: float, loads: Mapping[str, BackendLoad]) -> Decisions: ...

    def _on_arrive(self, tracked: Tracked, now: float) -> None:
        return None

    def _on_first_token(self, tracked: Tracked, now: float) -> None:
        return None

    def _on_progress(self, tracked: Tracked, now: float) -> None:
        return None

    def _on_finished(self, tracked: Tracked, now: float) -> None:
        return None

    def _on_aborted(self, tracked: Tracked, now: float, computed_tokens: int | None) -> None:
        return None

    def _on_event(self, event: GateEvent, backend: str, now: float) -> None:
        return None

    def _late_abort(self, tracked: Tracked) -> None:
        return None


def send_all(held: Iterable[Tracked]) -> tuple[Send, ...]:
    """Send each with the client's `max_tokens`."""
    return tuple(Send(t.request.id, t.request.max_tokens) for t in held)


def earliest(times: Iterable[float | None], after: float) -> float | None:
    """The earliest finite time strictly after `after`, or None."""
    values = [t for t in times if t is not None and math.isfinite(t) and t > after]
    return min(values) if values else None
