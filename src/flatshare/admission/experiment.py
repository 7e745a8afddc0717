"""Running an admission plan: every job in `plan.workers` processes, each saving its runs.

Jobs: one per synthetic seed (all synthetic conditions and the shorts alone), and one per (trace,
engines, window, condition). A window's baseline runs first among its jobs; its calibration then
releases the window's calibrated conditions. Uncalibrated conditions start at once.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Executor, Future, ProcessPoolExecutor, wait
from pathlib import Path
from typing import Any

from flatshare.admission.plan import TRACE_BASELINE, AdmissionPlan, TraceCase
from flatshare.admission.runs import write_marker
from flatshare.admission.synthetic import run_synthetic_seed
from flatshare.admission.traces import run_baseline_and_calibrate, run_trace

Window = tuple[TraceCase, int, int]


class _Serial(Executor):
    """An executor that runs each job when it is submitted (for `workers=1` and tests)."""

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        future: Future[Any] = Future()
        try:
            future.set_result(fn(*args, **kwargs))
        except Exception as exc:
            future.set_exception(exc)
        return future


def plan_json(plan: AdmissionPlan) -> dict[str, Any]:
    return json.loads(json.dumps(dataclasses.asdict(plan), default=str))


def count_jobs(plan: AdmissionPlan) -> int:
    windows = len(plan.traces) * len(plan.engines) * plan.windows
    return plan.synthetic.seeds + windows * len(plan.trace_conditions)


def _windows(plan: AdmissionPlan) -> list[Window]:
    """Every (trace, engines, window), the longest replays first so the pool stays busy to the end."""
    windows = [(case, n, w) for case in plan.traces for n in plan.engines for w in range(plan.windows)]
    return sorted(windows, key=lambda x: -x[0].replay_s(x[1]) * x[1])


def run_plan(out: Path, plan: AdmissionPlan, on_done: Callable[[str], None] | None = None) -> None:
    """Run the whole plan into `out` (see `runs.py` for the layout)."""
    write_marker(out, plan_json(plan))
    baseline = next(c for c in plan.trace_conditions if c.key == TRACE_BASELINE)
    calibrated = [c for c in plan.trace_conditions if c.key != TRACE_BASELINE and c.calibrated]
    free = [c for c in plan.trace_conditions if c.key != TRACE_BASELINE and not c.calibrated]
    pool: Executor = ProcessPoolExecutor(max_workers=plan.workers) if plan.workers > 1 else _Serial()
    with pool:
        pending: dict[Future[Any], tuple[str, Window | None]] = {}
        for case, n, w in _windows(plan):
            job = pool.submit(run_baseline_and_calibrate, out, plan, case, n, w, baseline)
            pending[job] = ("baseline", (case, n, w))
        for seed in range(plan.synthetic.seeds):
            pending[pool.submit(run_synthetic_seed, out, plan, seed)] = ("synthetic", None)
        for case, n, w in _windows(plan):
            for condition in free:
                pending[pool.submit(run_trace, out, plan, case, n, w, condition)] = ("trace", None)
        while pending:
            done, _ = wait(pending, return_when=FIRST_COMPLETED)
            for job in done:
                kind, window = pending.pop(job)
                result = job.result()
                if kind == "baseline" and window is not None:
                    _, calibration = result
                    for condition in calibrated:
                        follow = pool.submit(run_trace, out, plan, *window, condition, calibration)
                        pending[follow] = ("trace", None)
                if on_done is not None:
                    on_done(kind)
