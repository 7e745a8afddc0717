"""`leaseholder`: the write-up's gateway (its first design, "Leaseholder, after the leases it would hold
on each session's memory"): it watches events, a caller starting to speak or an agent's tool call
coming back, and keeps room for the next voice turn. The seed names three mechanisms; a gateway can only
hold back, pace or rewrite what it sends, so here each is one concrete rule, per backend:

(a) defer: a caller starting to speak (event `caller_speaking`) opens a *lease* on the backend of the
    caller's session, until the caller's next turn arrives or `lease_s` passes. While a backend has a
    lease, agent requests for it are held (`deferred`).
(b) throttle: while a voice turn is being answered on a backend (sent, not finished), agent requests
    for it are paced: at most one is sent per `throttle_interval_s` (`throttled`: those that had to wait
    for a slot). Pacing what is sent is the only handle a gateway has on the engine's prefill.
(c) shorten: a voice turn sent to a backend whose KV use is at or above `shorten_kv_usage` goes with
    `max_tokens` cut to `short_max_tokens` (`shortened`).
No agent request is held longer than `max_hold_s` (`hold_expired`). `tool_returned` events are counted
(`events_tool_returned`); the request that follows is held or sent by (a) and (b) when it arrives, which
is the first moment a gateway holds it. The seed's finding to check: its throttle never deferred a
request, and all it did was shorten every voice reply.
Counters: `leases`, `lease_expired`, `deferred`, `throttled`, `shortened`, `hold_expired`.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass

from flatshare.policy.classes import ClassSettings
from flatshare.policy.gates.core import Decisions, Gate, GateEvent, Send, Tracked, earliest
from flatshare.policy.load import BackendLoad


@dataclass(frozen=True)
class LeaseholderSettings(ClassSettings):
    lease_s: float = 10.0
    throttle_interval_s: float = 0.5
    shorten_kv_usage: float = 0.9
    short_max_tokens: int = 16
    max_hold_s: float = 30.0

    def __post_init__(self) -> None:
        for name in ("lease_s", "max_hold_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}")
        if self.throttle_interval_s < 0:
            raise ValueError(f"throttle_interval_s must be >= 0, got {self.throttle_interval_s}")
        if not 0.0 <= self.shorten_kv_usage <= 1.0:
            raise ValueError(f"shorten_kv_usage must lie in [0, 1], got {self.shorten_kv_usage}")
        if self.short_max_tokens < 1:
            raise ValueError(f"short_max_tokens must be >= 1, got {self.short_max_tokens}")
        super().__post_init__()


class LeaseholderGate(Gate):
    name = "leaseholder"
    COUNTERS = ("leases", "lease_expired", "deferred", "throttled", "shortened", "hold_expired")

    def __init__(self, settings: LeaseholderSettings) -> None:
        super().__init__(settings.classes())
        self.settings = settings
        self.leases: dict[str, dict[str, float]] = defaultdict(dict)  # backend -> session -> expiry
        self.answering: dict[str, set[str]] = defaultdict(set)  # backend -> voice requests in flight
        self.last_agent_send: dict[str, float] = {}

    def _on_event(self, event: GateEvent, backend: str, now: float) -> None:
        if event.kind == "caller_speaking":
            self.leases[backend][event.session_id] = now + self.settings.lease_s
            self.counters["leases"] += 1

    def _on_arrive(self, tracked: Tracked, now: float) -> None:
        session = tracked.request.session_id
        if tracked.cls == "voice" and session is not None:
            for sessions in self.leases.values():
                sessions.pop(session, None)  # the turn the lease was kept for has come

    def _on_finished(self, tracked: Tracked, now: float) -> None:
        self.answering[tracked.request.backend].discard(tracked.request.id)

    def _expire(self, now: float) -> None:
        for sessions in self.leases.values():
            for session, expiry in list(sessions.items()):
                if now >= expiry:
                    del sessions[session]
                    self.counters["lease_expired"] += 1

    def _decide(self, now: float, loads: Mapping[str, BackendLoad]) -> Decisions:
        self._expire(now)
        s = self.settings
        sends = []
        for tracked in sorted(self.held(), key=lambda t: t.cls != "voice"):  # voice first, then FIFO
            request, backend = tracked.request, tracked.request.backend
            if tracked.cls == "voice":
                max_tokens = request.max_tokens
                load = loads.get(backend)
                full = load is not None and load.kv_usage is not None and load.kv_usage >= s.shorten_kv_usage
                if full and (max_tokens is None or max_tokens > s.short_max_tokens):
                    max_tokens = s.short_max_tokens
                    self.counters["shortened"] += 1
                self.answering[backend].add(request.id)
                sends.append(Send(request.id, max_tokens))
                continue
            if tracked.cls == "agent" and now - tracked.held_since_s < s.max_hold_s:
                if self.leases[backend]:
                    self._mark(tracked, "deferred")
                    continue
                last = self.last_agent_send.get(backend)
                if self.answering[backend] and last is not None and now - last < s.throttle_interval_s:
                    self._mark(tracked, "throttled")
                    continue
            elif tracked.cls == "agent":
                self.counters["hold_expired"] += 1
            if tracked.cls == "agent":
                self.last_agent_send[backend] = now
            sends.append(Send(request.id, request.max_tokens))
        return Decisions(tuple(sends))

    def _mark(self, tracked: Tracked, what: str) -> None:
        if what not in tracked.marks:
            tracked.marks.add(what)
            self.counters[what] += 1

    def next_wake_s(self, now: float) -> float | None:
        s = self.settings
        agents = [t for t in self.held() if t.cls == "agent"]
        if not agents:
            return None
        times: list[float | None] = [t.held_since_s + s.max_hold_s for t in agents]
        times += [expiry for sessions in self.leases.values() for expiry in sessions.values()]
        times += [
            self.last_agent_send[b] + s.throttle_interval_s
            for b in {t.request.backend for t in agents}
            if b in self.last_agent_send
        ]
        return earliest(times, now)
