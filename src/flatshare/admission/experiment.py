"""Running an admission plan: its jobs through an executor (`flatshare.lab`), each saving its runs.

Jobs: one per synthetic seed (all synthetic conditions and the shorts alone), and one per (trace,
engines, window, condition). A window's baseline runs first among its jobs; its calibration then
releases the window's calibrated conditions (follow-up jobs). Uncalibrated conditions start at once.
"""

from __future__ import annotations

import dataclasses
import functools
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flatshare.admission.plan import TRACE_BASELINE, AdmissionPlan, Condition, TraceCase
from flatshare.admission.runs import write_marker
from flatshare.admission.synthetic import run_synthetic_seed
from flatshare.admission.traces import run_baseline_and_calibrate, run_trace, workload_key
from flatshare.lab.executors import Executor, LocalExecutor, OnDone
from flatshare.lab.jobs import Job, JobsFailed
from flatshare.policy.calibrate import Calibration

Window = tuple[TraceCase, int, int]
SYNTHETIC = "synthetic"


@dataclass(frozen=True)
class AdmissionJob:
    """One job's parameters besides its seed (a trace job's seed is its window).

    `kind`: `synthetic` (every synthetic condition for the seed), `baseline` (the window's baseline,
    then its calibration) or `trace` (one condition on the window, with `calibration` when it needs one).
    """

    kind: str
    case: TraceCase | None = None
    engines: int = 0
    condition: Condition | None = None
    calibration: Calibration | None = None

    def __post_init__(self) -> None:
        if self.kind not in (SYNTHETIC, "baseline", "trace"):
            raise ValueError(f"admission job: unknown kind {self.kind!r}")
        if self.kind != SYNTHETIC and (self.case is None or self.condition is None or self.engines < 2):
            raise ValueError("admission job: a trace job needs its case, engines and condition")


def plan_json(plan: AdmissionPlan) -> dict[str, Any]:
    data = dataclasses.asdict(plan) | {"engine": plan.engine.to_json()}  # its own JSON form
    return json.loads(json.dumps(data, default=str))


def count_jobs(plan: AdmissionPlan) -> int:
    windows = len(plan.traces) * len(plan.engines) * plan.windows
    return plan.synthetic.seeds + windows * len(plan.trace_conditions)


def _windows(plan: AdmissionPlan) -> list[Window]:
    """Every (trace, engines, window), the longest replays first so the pool stays busy to the end."""
    windows = [(case, n, w) for case in plan.traces for n in plan.engines for w in range(plan.windows)]
    return sorted(windows, key=lambda x: -x[0].replay_s(x[1]) * x[1])


def _trace_job(
    kind: str, window: Window, condition: Condition, calibration: Calibration | None = None
) -> Job[AdmissionJob]:
    case, engines, w = window
    params = AdmissionJob(kind, case, engines, condition, calibration)
    return Job(f"{workload_key(case, engines)}/{condition.key}", w, params)


def plan_jobs(plan: AdmissionPlan) -> list[Job[AdmissionJob]]:
    """The jobs that can start at once: baselines first, then the synthetic seeds, then the trace
    conditions that need no calibration."""
    baseline = next(c for c in plan.trace_conditions if c.key == TRACE_BASELINE)
    free = [c for c in plan.trace_conditions if c.key != TRACE_BASELINE and not c.calibrated]
    jobs = [_trace_job("baseline", window, baseline) for window in _windows(plan)]
    jobs += [Job(SYNTHETIC, seed, AdmissionJob(SYNTHETIC)) for seed in range(plan.synthetic.seeds)]
    jobs += [_trace_job("trace", window, c) for window in _windows(plan) for c in free]
    return jobs


def follow_ups(plan: AdmissionPlan, job: Job[AdmissionJob], result: Any) -> list[Job[AdmissionJob]]:
    """After a baseline: the window's calibrated conditions, with the calibration it returned."""
    p = job.params
    if p.kind != "baseline" or p.case is None:
        return []
    _, calibration = result
    window = (p.case, p.engines, job.seed)
    calibrated = [c for c in plan.trace_conditions if c.key != TRACE_BASELINE and c.calibrated]
    return [_trace_job("trace", window, c, calibration) for c in calibrated]


def run_job(out: Path, plan: AdmissionPlan, job: Job[AdmissionJob]) -> Any:
    """The executors' run function: one job's runs, saved under `out`."""
    p = job.params
    if p.kind == SYNTHETIC:
        return run_synthetic_seed(out, plan, job.seed)
    assert p.case is not None and p.condition is not None  # checked by AdmissionJob
    if p.kind == "baseline":
        return run_baseline_and_calibrate(out, plan, p.case, p.engines, job.seed, p.condition)
    return run_trace(out, plan, p.case, p.engines, job.seed, p.condition, p.calibration)


def run_plan(
    out: Path, plan: AdmissionPlan, on_done: OnDone | None = None, executor: Executor | None = None
) -> None:
    """Run the whole plan into `out` (see `runs.py` for the layout); `executor` defaults to
    `plan.workers` local processes. Every job runs even when some fail; then `JobsFailed` names them."""
    out = out.resolve()
    write_marker(out, plan_json(plan))
    pool = executor if executor is not None else LocalExecutor(plan.workers)
    failures = pool.run(
        plan_jobs(plan),
        functools.partial(run_job, out, plan),
        on_done,
        functools.partial(follow_ups, plan),
    )
    if failures:
        raise JobsFailed(failures)
