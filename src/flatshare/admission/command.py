"""The body of `flatshare experiment admission`: plain arguments in, an experiment folder out.

The CLI maps its options one to one onto `experiment_admission`; a `None` option keeps the plan's
value (`quick_plan` or `full_plan`). Errors in the options raise `InputError`.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from flatshare.admission.plan import AdmissionPlan, full_plan, quick_plan
from flatshare.errors import InputError

DEFAULT_TRACES = Path("../shared/traces")


def parse_engines(text: str) -> tuple[int, ...]:
    try:
        counts = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise InputError(f"--engines: expected comma-separated integers, got {text!r}") from None
    if not counts or min(counts) < 2:
        raise InputError(f"--engines: each cluster needs at least 2 engines, got {text!r}")
    return counts


def build_plan(
    quick: bool,
    traces: Path,
    engines: str | None = None,
    seeds: int | None = None,
    windows: int | None = None,
    sharegpt: Path | None = None,
    workers: int = 0,
) -> AdmissionPlan:
    """The plan the options describe (quick or full, then each given option applied)."""
    if not traces.is_dir():
        raise InputError(
            f"--traces: {traces} is not a folder (it should hold azure-llm-2023/ and mooncake-fast25/)"
        )
    if sharegpt is not None and not sharegpt.is_file():
        raise InputError(f"--sharegpt: {sharegpt}: no such file")
    try:
        plan = quick_plan(traces, sharegpt) if quick else full_plan(traces, sharegpt=sharegpt)
        changes: dict[str, Any] = {}
        if engines is not None:
            changes["engines"] = parse_engines(engines)
        if seeds is not None:
            changes["synthetic"] = dataclasses.replace(plan.synthetic, seeds=seeds)
        if windows is not None:
            changes["windows"] = windows
        if workers:
            changes["workers"] = workers
        return dataclasses.replace(plan, **changes) if changes else plan
    except ValueError as exc:
        raise InputError(f"experiment admission: {exc}") from None


def experiment_admission(
    out: Path,
    quick: bool = False,
    engines: str | None = None,
    seeds: int | None = None,
    windows: int | None = None,
    traces: Path = DEFAULT_TRACES,
    sharegpt: Path | None = None,
    endpoint: str | None = None,
    workers: int = 0,
    on_progress: Callable[[int, int], None] | None = None,
) -> dict[str, Any]:
    """Run the admission experiment into `out` and build its summary, report and figures.

    `on_progress(done, total)` is called after each job. Returns the summary with `wall_s` added.
    `endpoint` (a running gateway) is not implemented yet: it raises InputError.
    """
    from flatshare.admission.experiment import count_jobs, run_plan
    from flatshare.admission.report import build_report

    if endpoint is not None:
        raise InputError(
            "experiment admission --endpoint: not implemented yet; run the simulated cluster (no --endpoint), "
            "or replay a workload against the gateway with `flatshare replay`"
        )
    plan = build_plan(quick, traces, engines, seeds, windows, sharegpt, workers)
    total = count_jobs(plan)
    done = [0]

    def advance(_: str) -> None:
        done[0] += 1
        if on_progress is not None:
            on_progress(done[0], total)

    start = time.monotonic()
    run_plan(out, plan, on_done=advance)
    summary = build_report(out)
    return summary | {"wall_s": round(time.monotonic() - start, 1)}
