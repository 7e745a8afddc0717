"""One wall-clock run through the gateway: wait until its backends idle, replay a workload, poll them.

What comes back (`WallRun`): the driver's records (`engine` is the backend the gateway chose), the polls
of `/gateway/backends` (one row per backend, `t` on the run's clock), the decisions rebuilt from the
routing headers (`gatewaydecisions`), the preemptions summed over the backends, and the wall time.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import httpx

from flatshare.admission.cluster import DecisionRecord
from flatshare.admission.endpointplan import EndpointPlan
from flatshare.admission.gatewayclient import BackendPoller, GatewayInfo, wait_idle
from flatshare.admission.gatewaydecisions import decisions_from
from flatshare.aiotasks import cancel
from flatshare.replay.endpoints import Endpoint
from flatshare.replay.ledger import Ledger
from flatshare.replay.wallclock import WallClockOptions, run_wallclock
from flatshare.runfiles.records import ReplayRecord
from flatshare.workloads.model import Workload


@dataclass(frozen=True)
class WallRun:
    records: list[ReplayRecord]
    samples: list[dict[str, Any]]
    decisions: list[DecisionRecord]
    preemptions: int
    wall_s: float


async def replay_through(
    client: httpx.AsyncClient,
    plan: EndpointPlan,
    workload: Workload,
    duration_s: float | None = None,
    gateway: GatewayInfo | None = None,
) -> WallRun:
    """Wait for idle backends, then replay `workload` through `gateway` (the plan's main one unless given)
    in wall time."""
    gateway = gateway or plan.gateway
    await wait_idle(client, gateway.url, plan.idle_timeout_s)
    heads: dict[str, tuple[str, str, str]] = {}

    def on_response(request_id: str, headers: httpx.Headers) -> None:
        backend = headers.get("x-flatshare-backend")
        if backend:
            reason = headers.get("x-flatshare-reason", "")
            heads[request_id] = (backend, reason, headers.get("x-flatshare-preferred", backend))

    options = WallClockOptions(
        duration_s=duration_s,
        grace_s=plan.drain_s,
        read_timeout_s=plan.read_timeout_s,
        send_priority=plan.priorities,
        sample_metrics=False,
    )
    endpoint = Endpoint(gateway.url, gateway.model, gateway.max_model_len)
    ledger = Ledger()
    poller = BackendPoller(client, gateway.url, plan.poll_s)
    polling = asyncio.create_task(poller.run(), name="gateway backends")
    start = time.monotonic()
    try:
        await run_wallclock(workload, [endpoint], ledger, options, on_response=on_response)
    finally:
        await cancel(polling)
    t0 = ledger.clock.t0
    samples = [
        {
            "engine": load.name,
            "t": round(perf_s - t0, 6),
            "kv_usage": load.kv_usage,
            "running": load.running,
            "waiting": load.waiting,
            "preemptions_total": int(load.preemptions),
        }
        for perf_s, load in poller.readings
        if perf_s >= t0
    ]
    records = ledger.sorted_records()
    return WallRun(
        records,
        samples,
        decisions_from(records, heads, samples),
        preemptions(samples),
        round(time.monotonic() - start, 3),
    )


def preemptions(samples: Sequence[dict[str, Any]]) -> int:
    """Preemptions during the run, summed over the backends (last minus first cumulative reading)."""
    by_engine: dict[str, list[int]] = {}
    for s in samples:
        by_engine.setdefault(s["engine"], []).append(int(s["preemptions_total"]))
    return sum(max(v) - min(v) for v in by_engine.values())
