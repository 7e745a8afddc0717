"""`agent-cap`: at most `max_agents_per_backend` agent requests in flight on each backend; the rest wait
in the gateway, first come first served. Voice turns and other requests pass at once.

The first seed lists "caps on how many agent requests could run at once" among the things it tried
(slowest turns 8.6-12.1 s, beside 10.48 s for tuned vLLM). A request is in flight from its send until
it finishes (or the client leaves); the cap counts per backend, as each backend is its own engine.
Counters: `max_agents_in_flight` (the most on one backend at once, never above the cap) and the shared
`held_agent` (agent requests that waited for a slot) and `max_hold_s`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass

from flatshare.policy.classes import ClassSettings
from flatshare.policy.gates.core import HELD, Decisions, Gate, Send
from flatshare.policy.load import BackendLoad


@dataclass(frozen=True)
class AgentCapSettings(ClassSettings):
    max_agents_per_backend: int = 2

    def __post_init__(self) -> None:
        if self.max_agents_per_backend < 1:
            raise ValueError(f"max_agents_per_backend must be >= 1, got {self.max_agents_per_backend}")
        super().__post_init__()


class AgentCapGate(Gate):
    name = "agent-cap"
    COUNTERS = ("max_agents_in_flight",)

    def __init__(self, settings: AgentCapSettings) -> None:
        super().__init__(settings.classes())
        self.settings = settings

    def _decide(self, now: float, loads: Mapping[str, BackendLoad]) -> Decisions:
        cap = self.settings.max_agents_per_backend
        agents = Counter(
            t.request.backend for t in self.requests.values() if t.state != HELD and t.cls == "agent"
        )
        sends = []
        for tracked in self.held():
            backend = tracked.request.backend
            if tracked.cls == "agent":
                if agents[backend] >= cap:
                    continue
                agents[backend] += 1
            sends.append(Send(tracked.request.id, tracked.request.max_tokens))
        peak = max(agents.values(), default=0)
        self.counters["max_agents_in_flight"] = max(self.counters["max_agents_in_flight"], peak)
        return Decisions(tuple(sends))
