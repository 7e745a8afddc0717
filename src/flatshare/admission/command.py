"""The bodies of `flatshare experiment admission` and `experiment admission-endpoint`: plain arguments
in, an experiment folder out.

The CLI maps its options one to one onto `experiment_admission` (simulated clusters, through an executor
of `flatshare.lab`) and `experiment_admission_endpoint` (a running gateway, `endpoint.py`, with its own
`EndpointOptions`); a `None` option keeps the plan's value (`quick_plan` or `full_plan`). Errors in the
options raise `InputError`.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from flatshare.admission.plan import AdmissionPlan, SyntheticPlan, full_plan, quick_plan
from flatshare.errors import InputError
from flatshare.workloads.tokens import DEFAULT_VOCAB

if TYPE_CHECKING:
    from flatshare.admission.results import AdmissionSummary

DEFAULT_TRACES = Path("../shared/traces")


@dataclass(frozen=True)
class Finished:
    """A finished experiment: its summary (as written to `summary.json`) and how long it took."""

    summary: AdmissionSummary
    wall_s: float


def parse_engines(text: str) -> tuple[int, ...]:
    try:
        counts = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise InputError(f"--engines: expected comma-separated integers, got {text!r}") from None
    if not counts or min(counts) < 2:
        raise InputError(f"--engines: each cluster needs at least 2 engines, got {text!r}")
    return counts


def parse_short_prompt(text: str) -> tuple[int, int]:
    low, sep, high = text.partition(",")
    try:
        bounds = (int(low), int(high))
    except ValueError:
        raise InputError(f"--short-prompt: expected LOW,HIGH (integers), got {text!r}") from None
    if not sep or not 1 <= bounds[0] <= bounds[1]:
        raise InputError(f"--short-prompt: expected 1 <= LOW <= HIGH, got {text!r}")
    return bounds


@dataclasses.dataclass(frozen=True)
class EndpointOptions:
    """The endpoint-mode options as given (None: the plan's value)."""

    admin_token: str = dataclasses.field(default="", repr=False)
    model: str | None = None
    long_tokens: int | None = None
    long_max_tokens: int | None = None
    short_prompt: str | None = None
    short_max_tokens: int | None = None
    trace_seconds: float | None = None
    long_first: bool = True
    priorities: bool = False
    vocab_size: int | None = None
    sage_endpoint: str | None = None


def synthetic_for_endpoint(
    base: SyntheticPlan, options: EndpointOptions, backends: int, max_model_len: int | None
) -> SyntheticPlan:
    """The synthetic case with the options' sizes, on the gateway's backends; InputError when they do not fit."""
    from flatshare.admission.plan import endpoint_thresholds

    changes: dict[str, Any] = {"engines": backends, "long_first": options.long_first}
    if options.long_tokens is not None:
        changes["long_tokens"] = options.long_tokens
    if options.long_max_tokens is not None:
        changes["long_max_tokens"] = options.long_max_tokens
    if options.short_prompt is not None:
        changes["short_prompt"] = parse_short_prompt(options.short_prompt)
    if options.short_max_tokens is not None:
        changes["short_max_tokens"] = options.short_max_tokens
    try:
        plan = dataclasses.replace(base, **changes)
    except ValueError as exc:
        raise InputError(f"experiment admission-endpoint: {exc}") from None
    if plan.long_tokens < 2 or plan.long_max_tokens < 1:
        raise InputError(
            f"--long-tokens must be >= 2 and --long-max-tokens >= 1, got {plan.long_tokens}, {plan.long_max_tokens}"
        )
    threshold = endpoint_thresholds(plan.long_tokens).input_tokens
    if plan.short_prompt[1] >= threshold:
        raise InputError(
            f"--short-prompt: the longest short ({plan.short_prompt[1]} tokens) must stay below the input "
            f"threshold min(8192, --long-tokens / 2) = {threshold}; raise --long-tokens or lower --short-prompt"
        )
    if max_model_len is not None:
        for what, size in (
            ("--long-tokens + --long-max-tokens", plan.long_tokens + plan.long_max_tokens),
            ("the longest short prompt + --short-max-tokens", plan.short_prompt[1] + plan.short_max_tokens),
        ):
            if size > max_model_len:
                raise InputError(
                    f"{what} = {size} exceeds the model's max_model_len {max_model_len}; lower --long-tokens"
                )
    return plan


def experiment_admission_endpoint(
    out: Path,
    endpoint: str,
    options: EndpointOptions | None = None,
    seeds: int | None = None,
    windows: int | None = None,
    traces: Path = DEFAULT_TRACES,
    sharegpt: Path | None = None,
    on_progress: Callable[[int, int], None] | None = None,
) -> Finished:
    """The experiment against the running gateway at `endpoint` (`endpoint.py`), in wall-clock time, one
    run at a time on the gateway's backends: check the gateway, run every condition through it, restore
    its routing (also on error or Ctrl-C), then build the report from the saved runs. `on_progress(done,
    total)` is called after each run. Returns the summary and the seconds it all took."""
    options = options or EndpointOptions()
    from flatshare import httpclient
    from flatshare.admission.gatewayclient import TIMEOUT, GatewayInfo, check_gateway, put_routing
    from flatshare.admission.plan import trace_cases

    if options.trace_seconds is not None:
        if not options.trace_seconds > 0:
            raise InputError(f"--trace-seconds must be > 0, got {options.trace_seconds}")
        if not traces.is_dir():
            raise InputError(
                f"--traces: {traces} is not a folder (it should hold azure-llm-2023/ and mooncake-fast25/)"
            )
    if sharegpt is not None and not sharegpt.is_file():
        raise InputError(f"--sharegpt: {sharegpt}: no such file")
    if seeds is not None and seeds < 1:
        raise InputError(f"--seeds must be >= 1, got {seeds}")
    with httpclient.client(TIMEOUT) as client:
        gateway = check_gateway(endpoint, options.admin_token, options.model, client)
        sage_gateway = (
            None
            if options.sage_endpoint is None
            else check_gateway(options.sage_endpoint, options.admin_token, gateway.model, client)
        )
        base = SyntheticPlan(seeds=seeds) if seeds is not None else SyntheticPlan()
        synthetic = synthetic_for_endpoint(base, options, len(gateway.backends), gateway.max_model_len)
        from flatshare.admission.endpoint import EndpointExperiment, restore
        from flatshare.admission.endpointplan import EndpointPlan
        from flatshare.admission.report import build_report
        from flatshare.replay.wallclock import run_in_loop

        try:
            plan = EndpointPlan(
                gateway,
                synthetic,
                traces=trace_cases(traces, True, sharegpt) if options.trace_seconds else (),
                trace_s=options.trace_seconds,
                windows=windows or 1,
                priorities=options.priorities,
                vocab_size=options.vocab_size or DEFAULT_VOCAB,
                sage_gateway=sage_gateway,
            )
        except ValueError as exc:
            raise InputError(f"experiment admission-endpoint: {exc}") from None
        total = plan.count_runs()
        done = [0]

        def advance(_: str) -> None:
            done[0] += 1
            if on_progress is not None:
                on_progress(done[0], total)

        def put(target: GatewayInfo, change: dict[str, Any]) -> None:
            put_routing(client, target.url, options.admin_token, change)

        start = time.monotonic()
        try:
            run_in_loop(EndpointExperiment(out, plan, put, advance).run())
        finally:
            for used in (gateway, sage_gateway):
                if used is not None:
                    restore(client, used, options.admin_token)
    summary = build_report(out)
    return Finished(summary, round(time.monotonic() - start, 1))


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
    workers: int = 0,
    executor: str = "local",
    ray_address: str | None = None,
    on_progress: Callable[[int, int], None] | None = None,
) -> Finished:
    """Run the admission experiment on simulated clusters into `out` and build its summary, report and
    figures.

    Jobs run on `executor` (`local`: `workers` processes; `ray`: the cluster at `ray_address` or
    `RAY_ADDRESS`, else a local Ray instance). `on_progress(done, total)` is called after each job,
    failed or not. Returns the summary and the seconds it all took. When jobs fail, the others complete and
    `JobsFailed` names the failed ones (no report is built).
    """
    from flatshare.admission.experiment import count_jobs, run_plan
    from flatshare.admission.report import build_report
    from flatshare.lab.executors import make_executor

    pool = make_executor(executor, workers, ray_address)
    plan = build_plan(quick, traces, engines, seeds, windows, sharegpt, workers)
    total = count_jobs(plan)
    done = [0]

    def advance(*_: object) -> None:
        done[0] += 1
        if on_progress is not None:
            on_progress(done[0], total)

    start = time.monotonic()
    run_plan(out, plan, on_done=advance, executor=pool)
    summary = build_report(out)
    return Finished(summary, round(time.monotonic() - start, 1))
