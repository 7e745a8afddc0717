"""The admission experiment against a running flatshare gateway, in wall-clock time (`--endpoint URL`).

One gateway, several conditions: before each run the experiment switches the gateway's routing
(`PUT /gateway/routing`, admin token), waits until every backend is idle, then replays the workload
through the gateway with the wall-clock driver (`flatshare.replay.wallclock`). Each run is saved in the
simulated mode's layout (`runs.save_wallclock_run`), so `report.build_report` reads both alike:
- records: the driver's; `engine` is the backend the gateway chose (`x-flatshare-backend`);
- samples: `/gateway/backends` polled every `poll_s` during the run, one row per backend;
- decisions: each answer's `x-flatshare-backend`, `x-flatshare-reason`, `x-flatshare-preferred`, at the
  request's send time, with the backends as the last poll before it saw them (the client's view, not
  necessarily the gateway's at the decision);
- occupancy: none (per-request KV holdings are not visible from outside the engines), so the
  interference attribution is not computed and the report says so.

What runs:
- The synthetic case (`synthetic.synthetic_workload`, sizes from the options), every seed, each
  condition that only changes routing (`A-fcfs-one-engine`: `first`; `B-controller`: the threshold rule
  preferring the first backend), in both arrival orders unless `long_first` is off. The sage conditions
  (`sage`: `first`; `controller+sage`: the rule) run the same way through the plan's sage gateway, whose
  backends run sage, when there is one. make-room conditions are skipped: make-room lives in each
  backend's scheduler and cannot be switched from outside; start the backends with
  `--scheduler-cls flatshare.scheduler.MakeRoomScheduler` and run again.
- Priorities are not sent (every request at vLLM's default 0, which FCFS backends require) unless
  `priorities` is on: then shorts go at priority 1 and the long request at 10, for backends running the
  priority policy (make-room).
- The shorts alone: routing `first`, one after another (`alone_pause_s` apart, each after the previous
  finished), so each finds the backend idle.
- Traces only with `trace_s`: each window cut to `trace_s` seconds of replay, the `off` run first, the
  rule's thresholds calibrated on its first 20% (`traces.calibrate_from_run`), then the other policy
  conditions (`off+sage` and `on+sage` through the sage gateway, with the same thresholds, when there is
  one). Without it the trace part is not run (a wall-clock replay takes as long as the window).

Real backends keep their prefix caches from run to run, so every run's prompts are salted
(`endpointworkloads.salted`).

Thresholds of the synthetic case (`endpoint_thresholds`): the simulated mode's (KV use above 0, input
above 8,192 tokens), with the input threshold lowered to half the long request when that is shorter
(`min(8192, long_tokens // 2)`), so the long request is long and every short is not.
The routing in force before the experiment is put back at the end, also after an error or Ctrl-C.

Modules: `endpointplan` (what runs, what is skipped), `endpointworkloads` (salting, the shorts alone),
`gatewayreplay` (one run through the gateway), `gatewaydecisions` (decisions from routing headers),
`endpointfacts` (`run.json`'s facts); this one puts them in order and saves each run.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from flatshare import httpclient
from flatshare.admission.endpointfacts import synthetic_facts, trace_facts
from flatshare.admission.endpointplan import EndpointPlan, routing_change
from flatshare.admission.endpointworkloads import alone_workload, salted
from flatshare.admission.gatewayclient import TIMEOUT, GatewayInfo, put_routing
from flatshare.admission.gatewayreplay import WallRun, replay_through
from flatshare.admission.plan import (
    TRACE_BASELINE,
    Condition,
    TraceCase,
    endpoint_thresholds,
)
from flatshare.admission.runs import load_run, run_dir, save_wallclock_run, write_marker
from flatshare.admission.synthetic import ALONE, MAIN, synthetic_workload
from flatshare.admission.traces import calibrate_from_run, trace_workload, workload_key
from flatshare.policy.routing import Thresholds
from flatshare.workloads.model import Workload

Progress = Callable[[str], None]


Put = Callable[[GatewayInfo, dict[str, Any]], None]


class EndpointExperiment:
    """Runs an `EndpointPlan` into `out` (module docstring); `put(gateway, change)` switches a gateway's
    routing."""

    def __init__(self, out: Path, plan: EndpointPlan, put: Put, on_done: Progress) -> None:
        self.out = out
        self.plan = plan
        self.put = put
        self.on_done = on_done

    async def run(self) -> None:
        write_marker(self.out, self.plan.marker())
        async with httpclient.async_client(TIMEOUT) as client:
            for seed in range(self.plan.synthetic.seeds):
                await self._synthetic_seed(client, seed)
            if self.plan.trace_s:
                for case in self.plan.traces:
                    for window in range(self.plan.windows):
                        await self._trace_window(client, case, window)

    async def _synthetic_seed(self, client: httpx.AsyncClient, seed: int) -> None:
        plan = self.plan
        thresholds = endpoint_thresholds(plan.synthetic.long_tokens)
        for name, long_first in plan.orders:
            workload = synthetic_workload(plan.synthetic, seed, long_first)
            for condition in plan.conditions:
                gateway = plan.gateway_for(condition)
                self.put(gateway, routing_change(condition, thresholds))
                run = await replay_through(
                    client, plan, self._salted(workload, condition.key), gateway=gateway
                )
                facts = synthetic_facts(plan, run, name, condition, seed)
                self._save(name, condition.key, seed, run, facts)
        alone = Condition(ALONE, "first")
        self.put(plan.gateway, routing_change(alone, None))
        workload = alone_workload(synthetic_workload(plan.synthetic, seed), plan.alone_pause_s)
        run = await replay_through(client, plan, self._salted(workload, ALONE))
        self._save(MAIN, ALONE, seed, run, synthetic_facts(plan, run, MAIN, alone, seed))

    async def _trace_window(self, client: httpx.AsyncClient, case: TraceCase, window: int) -> None:
        plan = self.plan
        assert plan.trace_s is not None
        n = len(plan.gateway.backends)
        cut = dataclasses.replace(case, window_s=plan.trace_s * case.rate_for(n))
        workload = trace_workload(cut, window, n, plan.gateway.max_model_len or 131_072)
        key = workload_key(case, n)
        thresholds: Thresholds | None = None
        calibration: dict[str, Any] | None = None
        for condition in sorted(plan.trace_conditions, key=lambda c: c.key != TRACE_BASELINE):
            if condition.routing_policy == "threshold" and thresholds is None:
                raise AssertionError("the baseline runs first")  # pragma: no cover
            gateway = plan.gateway_for(condition)
            self.put(
                gateway,
                routing_change(condition, thresholds if condition.routing_policy == "threshold" else None),
            )
            run = await replay_through(
                client, plan, self._salted(workload, condition.key), duration_s=plan.trace_s, gateway=gateway
            )
            facts = trace_facts(plan, run, cut, window, condition, thresholds, calibration)
            folder = self._save(key, condition.key, window, run, facts)
            if condition.key == TRACE_BASELINE:
                result = calibrate_from_run(load_run(folder))
                thresholds = result.thresholds.thresholds()
                calibration = {
                    "source": result.thresholds.calibrated_from,
                    "cutoff_t": result.cutoff_t,
                    "token_samples": result.token_samples,
                    "kv_samples": result.kv_samples,
                }

    def _salted(self, workload: Workload, condition: str) -> Workload:
        salt = f"{self.plan.nonce}/{workload.name}/{condition}/s{workload.seed}"
        return salted(workload, salt, self.plan.vocab_size)

    def _save(self, workload: str, condition: str, seed: int, run: WallRun, facts: dict[str, Any]) -> Path:
        folder = run_dir(self.out, workload, condition, seed)
        save_wallclock_run(folder, run.records, run.samples, run.decisions, facts)
        self.on_done(f"{workload}/{condition}/s{seed}")
        return folder


def restore(client: httpx.Client, gateway: GatewayInfo, token: str) -> None:
    """Put back the routing in force before the experiment."""
    put_routing(client, gateway.url, token, gateway.routing)
