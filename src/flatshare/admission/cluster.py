"""The simulated cluster: several simulated engines behind the gateway's own routing policies.

At each request's arrival the router builds a `BackendLoad` per engine from the engine's current
state (`get_kv_cache_usage()`, `get_request_counts()`, plus requests routed there that the engine has not
yet admitted, which count as waiting), and `RequestFeatures` from the request (input tokens = prompt
tokens, `sequence` = this run's arrival counter), and calls the same policy function the gateway calls.
Readings are fresh (`stale=False`, age 0): the state at the end of each engine's step in progress when the
request arrives (the virtual-time driver keeps engines within one step of each other). Every decision is
logged with the snapshots it saw, as the gateway's audit trail does.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from flatshare.policy.load import BackendLoad
from flatshare.policy.policies import Policy
from flatshare.policy.routing import RequestFeatures
from flatshare.replay.virtual import VirtualRun, run_virtual
from flatshare.sim.config import EngineConfig
from flatshare.sim.engine import SimEngine, StepReport
from flatshare.sim.profile import StepTimeProfile
from flatshare.workloads.model import Workload, WorkloadRequest


def engine_name(index: int) -> str:
    return f"sim{index}"


@dataclass(frozen=True)
class DecisionRecord:
    """One routing decision (`decisions.jsonl`, one a line): when, what, where, why, and what it saw.

    `backends` holds, per engine in order, `name`, `kv_usage`, `running`, `waiting` as the policy saw them.
    """

    t: float
    request_id: str
    sequence: int
    input_tokens: int
    max_tokens: int
    cls: str
    backend: str
    preferred: str
    reason: str
    backends: tuple[dict[str, Any], ...]

    def to_json(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["backends"] = list(self.backends)
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> DecisionRecord:
        return cls(**(data | {"backends": tuple(data["backends"])}))

    @property
    def moved(self) -> bool:
        """The threshold rule sent the request away from its preferred backend."""
        return self.backend != self.preferred


def snapshot(name: str, engine: SimEngine, unadmitted: int) -> BackendLoad:
    """What the gateway's poller would report for `engine` right now (fresh)."""
    running, waiting = engine.scheduler.get_request_counts()
    return BackendLoad(
        name=name,
        kv_usage=float(engine.scheduler.get_kv_cache_usage()),
        running=running,
        waiting=waiting + unadmitted,
        preemptions=float(engine.preemptions),
        scrape_age_s=0.0,
        stale=False,
        healthy=True,
        kv_capacity_tokens=engine.config.kv_tokens,
    )


class PolicyRouter:
    """A `run_virtual` route function that asks a gateway policy and logs each decision."""

    def __init__(self, policy: Policy, n_engines: int) -> None:
        self.policy = policy
        self.names = [engine_name(i) for i in range(n_engines)]
        self.decisions: list[DecisionRecord] = []
        self._submitted = [0] * n_engines

    def __call__(self, request: WorkloadRequest, engines: Sequence[SimEngine]) -> int:
        snaps = tuple(
            snapshot(name, engine, self._submitted[i] - len(engine.records))
            for i, (name, engine) in enumerate(zip(self.names, engines, strict=True))
        )
        features = RequestFeatures(
            request_id=request.id,
            input_tokens=request.prompt_tokens,
            sequence=len(self.decisions),
            priority=request.priority,
            cls=request.cls,
            max_tokens=request.max_tokens,
        )
        decision = self.policy(features, snaps)
        index = self.names.index(decision.backend)
        self._submitted[index] += 1
        t = request.arrival_s if request.arrival_s is not None else min(e.now for e in engines)
        seen = tuple(
            {"name": s.name, "kv_usage": round(s.pressure, 6), "running": s.running, "waiting": s.waiting}
            for s in snaps
        )
        self.decisions.append(
            DecisionRecord(
                round(t, 6),
                request.id,
                features.sequence,
                features.input_tokens,
                request.max_tokens,
                request.cls,
                decision.backend,
                decision.preferred,
                decision.reason,
                seen,
            )
        )
        return index


class OccupancyRecorder:
    """Each engine's per-request KV holdings over time (`occupancy.jsonl`).

    A row `{engine, t, kv_usage, waiting, held}` is written after a step that changed the set of running
    requests (an admission, a finish or a preemption) and at least every `tick_s` otherwise; `held` maps
    each running request to the tokens in its KV (`num_computed_tokens`; a shared prefix counts for each
    holder). A row holds from its `t` until the engine's next row.
    """

    def __init__(self, tick_s: float) -> None:
        self.tick_s = tick_s
        self.rows: list[dict[str, Any]] = []

    def attach(self, name: str, engine: SimEngine) -> None:
        engine.on_step = _EngineTap(name, engine, self.tick_s, self.rows)


class _EngineTap:
    """The `on_step` hook of one engine for `OccupancyRecorder`."""

    def __init__(self, name: str, engine: SimEngine, tick_s: float, rows: list[dict[str, Any]]) -> None:
        self.name, self.engine, self.tick_s, self.rows = name, engine, tick_s, rows
        self.next_s = 0.0
        self.ids: frozenset[str] = frozenset()

    def __call__(self, report: StepReport) -> None:
        scheduler = self.engine.scheduler
        running = {r.request_id: int(r.num_computed_tokens) for r in scheduler.running}
        ids = frozenset(running)
        if ids == self.ids and report.end_s < self.next_s:
            return
        self.ids, self.next_s = ids, report.end_s + self.tick_s
        self.rows.append(
            {
                "engine": self.name,
                "t": round(report.end_s, 6),
                "kv_usage": round(float(scheduler.get_kv_cache_usage()), 6),
                "waiting": scheduler.get_request_counts()[1],
                "held": running,
            }
        )


@dataclass(frozen=True)
class ClusterRun:
    run: VirtualRun
    decisions: list[DecisionRecord]
    occupancy: list[dict[str, Any]]
    wall_s: float = 0.0


def run_cluster(
    workload: Workload,
    config: EngineConfig,
    profile: StepTimeProfile,
    n_engines: int,
    policy: Policy,
    *,
    until_s: float | None = None,
    stop_s: float | None = None,
    tick_s: float = 0.1,
) -> ClusterRun:
    """Replay `workload` on `n_engines` fresh engines of `config`, routed by `policy`."""
    engines = [SimEngine(config, profile) for _ in range(n_engines)]
    recorder = OccupancyRecorder(tick_s)
    for i, engine in enumerate(engines):
        recorder.attach(engine_name(i), engine)
    router = PolicyRouter(policy, n_engines)
    start = time.monotonic()
    run = run_virtual(workload, engines, route=router, until_s=until_s, stop_s=stop_s)
    return ClusterRun(run, router.decisions, recorder.rows, round(time.monotonic() - start, 3))
