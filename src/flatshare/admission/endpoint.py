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
  preferring the first backend), in both arrival orders unless `long_first` is off. make-room conditions
  are skipped: make-room lives in each backend's scheduler and cannot be switched from outside; start
  the backends with `--scheduler-cls flatshare.scheduler.MakeRoomScheduler` and run again.
- Priorities are not sent (every request at vLLM's default 0, which FCFS backends require) unless
  `priorities` is on: then shorts go at priority 1 and the long request at 10, for backends running the
  priority policy (make-room).
- The shorts alone: routing `first`, one after another (`alone_pause_s` apart, each after the previous
  finished), so each finds the backend idle.
- Traces only with `trace_s`: each window cut to `trace_s` seconds of replay, the `off` run first, the
  rule's thresholds calibrated on its first 20% (`traces.calibrate_from_run`), then the other policy
  conditions. Without it the trace part is not run (a wall-clock replay takes as long as the window).

Real backends keep their prefix caches from run to run, where the simulated mode starts every run on
fresh engines. So every run's prompts are salted (`salted`): each prompt span's key gets the run's own
prefix (an experiment nonce, the workload, the condition and the seed), which keeps the sharing within
a run (a conversation's turns) and makes nothing cached by an earlier run or experiment. Real-text
prompts (ShareGPT) get one salt token in front instead.

Thresholds of the synthetic case (`endpoint_thresholds`): the simulated mode's (KV use above 0, input
above 8,192 tokens), with the input threshold lowered to half the long request when that is shorter
(`min(8192, long_tokens // 2)`), so the long request is long and every short is not.
The routing in force before the experiment is put back at the end, also after an error or Ctrl-C.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from flatshare.admission.cluster import DecisionRecord
from flatshare.admission.gatewayclient import (
    TIMEOUT,
    BackendPoller,
    GatewayInfo,
    put_routing,
    wait_idle,
)
from flatshare.admission.plan import (
    CALIBRATION_FRACTION,
    TRACE_BASELINE,
    TRACE_CONDITIONS,
    Condition,
    SyntheticPlan,
    TraceCase,
    endpoint_thresholds,
)
from flatshare.admission.runs import load_run, run_dir, save_wallclock_run, write_marker
from flatshare.admission.synthetic import (
    ALONE,
    LONG_FIRST,
    MAIN,
    condition_facts,
    synthetic_workload,
    thresholds_json,
)
from flatshare.admission.traces import calibrate_from_run, trace_workload, workload_key
from flatshare.gateway.routing import Thresholds
from flatshare.replay.endpoints import Endpoint
from flatshare.replay.ledger import Ledger
from flatshare.replay.records import ReplayRecord
from flatshare.replay.wallclock import WallClockOptions, run_wallclock
from flatshare.workloads.model import Session, Workload, WorkloadRequest
from flatshare.workloads.tokens import DEFAULT_VOCAB, Span, check_vocab

MAKE_ROOM_HOW = (
    "make-room runs inside each backend's scheduler and cannot be switched from outside: start the backends "
    "with `--scheduler-cls flatshare.scheduler.MakeRoomScheduler --additional-config "
    '\'{"make_room": {"enabled": true}}\' --scheduling-policy priority` (serve-sim: `--scheduler make-room '
    "--make-room '{\"enabled\": true}' --policy priority`) and run again into another folder with `--priorities`: its A and B runs are then "
    "the make-room and controller+make-room cells"
)
TRACE_NOT_RUN = (
    "not run: a wall-clock replay of a trace window takes as long as the window; give --trace-seconds S to "
    "replay each window cut to S seconds"
)


@dataclass(frozen=True)
class EndpointPlan:
    """What endpoint mode runs (module docstring). `drain_s`: how long a trace run may go on after its
    last arrival; `idle_timeout_s`: the longest wait for idle backends before a run."""

    gateway: GatewayInfo
    synthetic: SyntheticPlan
    traces: tuple[TraceCase, ...] = ()
    trace_s: float | None = None
    windows: int = 1
    poll_s: float = 0.1
    alone_pause_s: float = 0.3
    drain_s: float = 120.0
    idle_timeout_s: float = 300.0
    read_timeout_s: float = 600.0
    nonce: str = field(default_factory=lambda: uuid.uuid4().hex[:12])
    priorities: bool = False
    vocab_size: int = DEFAULT_VOCAB

    def __post_init__(self) -> None:
        if self.trace_s is not None and not self.trace_s > 0:
            raise ValueError(f"trace seconds must be > 0, got {self.trace_s}")
        if self.windows < 1 or not self.poll_s > 0 or self.alone_pause_s < 0 or not self.drain_s > 0:
            raise ValueError("windows >= 1, poll_s > 0, alone_pause_s >= 0 and drain_s > 0 are needed")
        check_vocab(self.vocab_size)

    @property
    def conditions(self) -> tuple[Condition, ...]:
        return tuple(c for c in self.synthetic.conditions if not c.make_room)

    @property
    def skipped(self) -> tuple[Condition, ...]:
        return tuple(c for c in self.synthetic.conditions if c.make_room)

    @property
    def orders(self) -> list[tuple[str, bool]]:
        return [(MAIN, False), (LONG_FIRST, True)] if self.synthetic.long_first else [(MAIN, False)]

    def count_runs(self) -> int:
        synthetic = self.synthetic.seeds * (len(self.orders) * len(self.conditions) + 1)
        traces = len(self.traces) * self.windows * len(TRACE_CONDITIONS) if self.trace_s else 0
        return synthetic + traces

    def marker(self) -> dict[str, Any]:
        """`experiment.json`'s plan: the settings, what was skipped and why."""
        return {
            "mode": "endpoint",
            "nonce": self.nonce,
            "priorities": self.priorities,
            "vocab_size": self.vocab_size,
            "endpoint": self.gateway.url,
            "backends": list(self.gateway.backends),
            "model": self.gateway.model,
            "original_routing": self.gateway.routing,
            "synthetic": json_safe(dataclasses.asdict(self.synthetic)),
            "trace_s": self.trace_s,
            "windows": self.windows,
            "traces": [c.name for c in self.traces] if self.trace_s else [],
            "skipped": {
                "conditions": [{"key": c.key, "why": MAKE_ROOM_HOW} for c in self.skipped],
                "traces": None if self.trace_s else TRACE_NOT_RUN,
            },
        }


def json_safe(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(v) for v in value]
    return value


def routing_change(condition: Condition, thresholds: Thresholds | None) -> dict[str, Any]:
    """The `PUT /gateway/routing` body of a condition."""
    body: dict[str, Any] = {"policy": condition.policy, "prefer": condition.prefer}
    if thresholds is not None:
        body["thresholds"] = {"kv_usage": thresholds.kv_usage, "input_tokens": thresholds.input_tokens}
    return body


def salted(workload: Workload, salt: str, vocab_size: int = DEFAULT_VOCAB) -> Workload:
    """The workload with prompts no earlier run shares (module docstring), their token ids below
    `vocab_size` (the backends' model's vocabulary)."""

    def prompt(request: WorkloadRequest) -> WorkloadRequest:
        spans = request.prompt
        if all(isinstance(s, Span) for s in spans):
            return dataclasses.replace(
                request,
                prompt=tuple(Span(f"{salt}/{s.key}", s.length) for s in spans if isinstance(s, Span)),
                vocab_size=vocab_size,
            )
        return dataclasses.replace(request, prompt=(Span(f"{salt}/text", 1), *spans), vocab_size=vocab_size)

    sessions = tuple(
        dataclasses.replace(s, requests=tuple(prompt(r) for r in s.requests)) for s in workload.sessions
    )
    return dataclasses.replace(workload, sessions=sessions)


# -- one run ------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class WallRun:
    records: list[ReplayRecord]
    samples: list[dict[str, Any]]
    decisions: list[DecisionRecord]
    preemptions: int
    wall_s: float


def decisions_from(
    records: Sequence[ReplayRecord], heads: dict[str, tuple[str, str, str]], samples: Sequence[dict[str, Any]]
) -> list[DecisionRecord]:
    """A decision per answered request from its routing headers, at its send time, in send order; the
    backends as the last samples at or before it."""
    out = []
    answered = sorted((r for r in records if r.id in heads), key=lambda r: (r.send_s, r.id))
    ordered = sorted(samples, key=lambda s: s["t"])
    seen: dict[str, dict[str, Any]] = {}
    next_sample = 0  # both in time order: one pass over the samples
    for sequence, record in enumerate(answered):
        backend, reason, preferred = heads[record.id]
        while next_sample < len(ordered) and ordered[next_sample]["t"] <= record.send_s:
            sample = ordered[next_sample]
            seen[sample["engine"]] = {k: sample[k] for k in ("kv_usage", "running", "waiting")} | {
                "name": sample["engine"]
            }
            next_sample += 1
        out.append(
            DecisionRecord(
                round(record.send_s, 6),
                record.id,
                sequence,
                record.prompt_tokens,
                record.max_tokens,
                record.cls,
                backend,
                preferred,
                reason,
                tuple(seen.values()),
            )
        )
    return out


async def replay_through(
    client: httpx.AsyncClient,
    plan: EndpointPlan,
    workload: Workload,
    duration_s: float | None = None,
) -> WallRun:
    """Wait for idle backends, then replay `workload` through the gateway in wall time."""
    gateway = plan.gateway
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
        polling.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await polling
    t0 = ledger.clock.t0
    samples = [
        {"engine": r["engine"], "t": round(r["perf_s"] - t0, 6)}
        | {k: v for k, v in r.items() if k not in ("engine", "perf_s")}
        for r in poller.rows
        if r["perf_s"] >= t0
    ]
    records = ledger.sorted_records()
    return WallRun(
        records,
        samples,
        decisions_from(records, heads, samples),
        _preemptions(samples),
        round(time.monotonic() - start, 3),
    )


def _preemptions(samples: Sequence[dict[str, Any]]) -> int:
    """Preemptions during the run, summed over the backends (last minus first cumulative reading)."""
    by_engine: dict[str, list[int]] = {}
    for s in samples:
        by_engine.setdefault(s["engine"], []).append(int(s["preemptions_total"]))
    return sum(max(v) - min(v) for v in by_engine.values())


# -- facts ----------------------------------------------------------------------------------------------
def _common(plan: EndpointPlan, run: WallRun) -> dict[str, Any]:
    g = plan.gateway
    return {
        "mode": "endpoint",
        "endpoint": g.url,
        "backends": list(g.backends),
        "model": g.model,
        "priorities": plan.priorities,
        "profile": None,
        "engine_config": None,
        "preemptions": run.preemptions,
        "steps": None,
        "virtual_s": None,
        "scheduler_counters": {},
        "wall_s": run.wall_s,
    }


def synthetic_facts(
    plan: EndpointPlan, run: WallRun, workload: str, condition: Condition, seed: int
) -> dict[str, Any]:
    thresholds = endpoint_thresholds(plan.synthetic.long_tokens)
    return _common(plan, run) | {
        "workload": workload,
        "part": ALONE if condition.key == ALONE else "synthetic",
        "engines": 1 if condition.key == ALONE else len(plan.gateway.backends),
        "condition": condition_facts(condition),
        "seed": seed,
        "thresholds": thresholds_json(thresholds),
        "long_input_tokens": thresholds.input_tokens,
        "replay_s": None,
        "eval_from_s": 0.0,
    }


def alone_workload(workload: Workload, pause_s: float) -> Workload:
    """The shorts of `workload` one after another in one session, `pause_s` after each reply."""
    shorts = [r for r in workload.requests() if r.cls == "short"]
    spaced = tuple(
        dataclasses.replace(r, session_id="alone", pause_before_s=0.0 if i == 0 else pause_s, arrival_s=None)
        for i, r in enumerate(shorts)
    )
    return Workload(f"{workload.name}-alone", (Session("alone", "short", 0.0, spaced),), workload.seed)


# -- the whole experiment ---------------------------------------------------------------------------------
Progress = Callable[[str], None]


class EndpointExperiment:
    """Runs an `EndpointPlan` into `out` (module docstring); `put` switches the gateway's routing."""

    def __init__(
        self, out: Path, plan: EndpointPlan, put: Callable[[dict[str, Any]], None], on_done: Progress
    ) -> None:
        self.out = out
        self.plan = plan
        self.put = put
        self.on_done = on_done

    async def run(self) -> None:
        write_marker(self.out, self.plan.marker())
        async with httpx.AsyncClient(timeout=TIMEOUT) as client:
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
                self.put(routing_change(condition, thresholds))
                run = await replay_through(client, plan, self._salted(workload, condition.key))
                facts = synthetic_facts(plan, run, name, condition, seed)
                self._save(name, condition.key, seed, run, facts)
        alone = Condition(ALONE, "first")
        self.put(routing_change(alone, None))
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
        calibration = None
        for condition in sorted(TRACE_CONDITIONS, key=lambda c: c.key != TRACE_BASELINE):
            if condition.policy == "threshold" and thresholds is None:
                raise AssertionError("the baseline runs first")  # pragma: no cover
            self.put(routing_change(condition, thresholds if condition.policy == "threshold" else None))
            run = await replay_through(
                client, plan, self._salted(workload, condition.key), duration_s=plan.trace_s
            )
            facts = _common(plan, run) | {
                "workload": key,
                "trace": case.name,
                "part": "trace",
                "engines": n,
                "condition": condition_facts(condition),
                "seed": window,
                "spec": cut.spec(window, n),
                "rate": cut.rate_for(n),
                "thresholds": thresholds_json(thresholds if condition.policy == "threshold" else None),
                "calibration": calibration,
                "long_input_tokens": thresholds.input_tokens if thresholds else None,
                "replay_s": plan.trace_s,
                "eval_from_s": CALIBRATION_FRACTION * plan.trace_s,
                "drain_s": plan.drain_s,
            }
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
