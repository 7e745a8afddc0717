"""Where the virtual-time driver (`flatshare.replay.virtual`) hands requests to its engines: straight to
them (`DirectEdge`), or through a gateway-side gate (`flatshare.replay.virtual_gate.GateDriver`). Both
are an `Edge`, so the driver has one loop whether or not a gate stands in front of the engines.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from flatshare.runfiles.records import ReplayRecord
from flatshare.runfiles.sim_records import RequestRecord
from flatshare.sim.engine import SimEngine, StepReport
from flatshare.sim.requests import SimRequest
from flatshare.workloads.model import WorkloadRequest


class Edge(Protocol):
    """The driver's side of the engines: it issues requests, reports steps and asks for wake-ups."""

    def next_time(self) -> float | None:
        """When the edge next wants `wake` (None: never)."""

    def wake(self, t: float) -> None:
        """Act at `t` (an event or a wake-up that `next_time` named)."""

    def speech_starts(self, t: float, session_id: str) -> None:
        """A voice session's caller starts speaking at `t`."""

    def issue(self, t: float, request: WorkloadRequest, index: int, tool_returned: bool) -> None:
        """The session issues `request` at `t`, routed to engine `index`; `tool_returned`: an agent's tool
        call came back with it."""

    def stepped(self, engine: SimEngine, report: StepReport) -> list[tuple[WorkloadRequest, RequestRecord]]:
        """What a step of `engine` produced: the workload's requests it finished, each with its record."""

    def records(self, now: float) -> list[ReplayRecord]:
        """Every request's record when the run ends at `now`."""

    def counters(self) -> dict[str, float]:
        """The edge's counters at the end of the run (`VirtualRun.gate_counters`)."""


class DirectEdge:
    """No gate: each request goes to its engine when its session issues it."""

    def __init__(self, engines: Sequence[SimEngine]) -> None:
        self.engines = engines
        self.requests: dict[str, tuple[WorkloadRequest, int]] = {}  # request id -> (request, engine index)

    def next_time(self) -> float | None:
        return None

    def wake(self, t: float) -> None:
        raise AssertionError("a direct edge asks for no wake-up")

    def speech_starts(self, t: float, session_id: str) -> None:
        pass

    def issue(self, t: float, request: WorkloadRequest, index: int, tool_returned: bool) -> None:
        self.requests[request.id] = request, index
        sim_request = SimRequest(
            request.id,
            t,
            request.prompt_token_ids,
            request.max_tokens,
            request.priority,
            request.cls,
            first_sentence_tokens=request.first_sentence_tokens,
        )
        self.engines[index].submit(sim_request)

    def stepped(self, engine: SimEngine, report: StepReport) -> list[tuple[WorkloadRequest, RequestRecord]]:
        # ids the workload did not issue (arrival hints) are left out
        return [(self.requests[i][0], engine.records[i]) for i in report.finished if i in self.requests]

    def records(self, now: float) -> list[ReplayRecord]:
        """Each request's record as its engine holds it at that engine's own clock."""
        out = []
        for request_id, (request, index) in self.requests.items():
            engine = self.engines[index]
            record = engine.records[request_id].to_record(
                session_id=request.session_id,
                engine=f"sim{index}",
                now=engine.now,
                first_sentence_tokens=request.first_sentence_tokens,
            )
            out.append(record)
        return out

    def counters(self) -> dict[str, float]:
        return {}
