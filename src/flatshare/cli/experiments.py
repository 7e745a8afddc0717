"""Experiment commands: `experiment colocation` and `report`."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Annotated

import typer

from flatshare.cli.base import app, experiment_app, fail
from flatshare.errors import InputError


@experiment_app.command("colocation")
def experiment_colocation(
    out: Annotated[Path, typer.Option(help="Experiment folder: runs/, summary.json, report.md, figures.")],
    quick: Annotated[bool, typer.Option(help="2 callers, 2 seeds, 300 virtual s (a few minutes).")] = False,
    callers: Annotated[str, typer.Option(help="Caller counts, comma-separated.")] = "2,4,6",
    agents: Annotated[int, typer.Option(help="Coding-agent sessions beside the voice agent.")] = 24,
    seeds: Annotated[int, typer.Option(help="Seeds per condition (at least 5 for the full run).")] = 5,
    duration: Annotated[float, typer.Option(help="Virtual seconds per run.")] = 600.0,
    max_model_len: Annotated[
        int | None, typer.Option(help="Engine max model length; agent contexts compact there [seed: 16384].")
    ] = None,
    cpu_tier_tokens: Annotated[
        int | None, typer.Option(help="vLLM's CPU KV tier in tokens, 0 for off [seed preset: 65536].")
    ] = None,
    admission: Annotated[
        str | None,
        typer.Option(
            help="vLLM's admission rule: full-prompt (0.32's default) or first-chunk [seed preset: first-chunk]."
        ),
    ] = None,
    api_latency: Annotated[
        float | None, typer.Option(help="API server pass in seconds [seed preset: 0.06].")
    ] = None,
    agent_source: Annotated[
        str | None, typer.Option(help="Agents: synthetic (from the WEKA sample) or weka (its sessions).")
    ] = None,
    workers: Annotated[int, typer.Option(help="Processes running in parallel (0: one per core, max 2).")] = 0,
) -> None:
    """A voice agent beside coding agents under vLLM's stock scheduler and make-room variants, on the
    first seed's setup (`flatshare.experiments.setup.SEED`) unless an option changes it."""
    from rich.progress import Progress

    from flatshare.analysis.report import build_report
    from flatshare.experiments.colocation import QUICK, ColocationPlan, run_plan
    from flatshare.experiments.setup import SEED

    rules = {"full-prompt": True, "first-chunk": False, None: SEED.reserve_full_isl}
    try:
        if admission not in rules:
            raise ValueError(f"--admission must be full-prompt or first-chunk, got {admission!r}")
        setup = SEED.with_changes(
            max_model_len=SEED.max_model_len if max_model_len is None else max_model_len,
            cpu_tier_tokens=SEED.cpu_tier_tokens if cpu_tier_tokens is None else cpu_tier_tokens,
            reserve_full_isl=rules[admission],
            api_latency_s=SEED.api_latency_s if api_latency is None else api_latency,
            agent_source=agent_source or SEED.agent_source,
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
    except ValueError as exc:
        fail(f"experiment colocation: {exc}")
    total = len(list(plan.jobs()))
    with Progress() as progress:
        task = progress.add_task("co-location runs", total=total)
        run_plan(out, plan, on_done=lambda _: progress.advance(task))
    build_report(out)
    typer.echo(f"report: {out / 'report.md'}  summary: {out / 'summary.json'}")


@experiment_app.command("admission")
def experiment_admission(
    out: Annotated[Path, typer.Option(help="Experiment folder: runs/, summary.json, report.md, figures.")],
    quick: Annotated[bool, typer.Option(help="10 synthetic seeds, one short window per trace.")] = False,
    engines: Annotated[
        str | None, typer.Option(help="Engine counts per cluster for the traces [2,4].")
    ] = None,
    seeds: Annotated[int | None, typer.Option(help="Seeds of the synthetic case [10].")] = None,
    windows: Annotated[int | None, typer.Option(help="Windows per trace [3; quick: 1].")] = None,
    traces: Annotated[Path, typer.Option(help="Folder holding azure-llm-2023/ and mooncake-fast25/.")] = Path(
        "../shared/traces"
    ),
    sharegpt: Annotated[Path | None, typer.Option(help="A ShareGPT JSON file to replay as well.")] = None,
    endpoint: Annotated[
        str | None,
        typer.Option(help="Run against this running flatshare gateway (wall clock; docs/admission.md)."),
    ] = None,
    workers: Annotated[int, typer.Option(help="Processes running in parallel (0: one per core, max 2).")] = 0,
    admin_token: Annotated[
        str,
        typer.Option(
            envvar="FLATSHARE_ADMIN_TOKEN",
            show_envvar=True,
            help="--endpoint: the gateway's admin token (switches its routing per condition).",
        ),
    ] = "",
    model: Annotated[
        str | None, typer.Option(help="--endpoint: model name to send [the first of GET /v1/models].")
    ] = None,
    vocab_size: Annotated[
        int | None, typer.Option(help="--endpoint: prompt token ids lie below this (the model's) [32000].")
    ] = None,
    long_tokens: Annotated[
        int | None, typer.Option(help="--endpoint: input tokens of the long request [50000].")
    ] = None,
    long_max_tokens: Annotated[
        int | None, typer.Option(help="--endpoint: output tokens of the long request [256].")
    ] = None,
    short_prompt: Annotated[
        str | None, typer.Option(help="--endpoint: input tokens of the shorts, LOW,HIGH [100,500].")
    ] = None,
    short_max_tokens: Annotated[
        int | None, typer.Option(help="--endpoint: most output tokens of a short (1-256) [256].")
    ] = None,
    trace_seconds: Annotated[
        float | None,
        typer.Option(help="--endpoint: replay each trace window cut to this many seconds [traces not run]."),
    ] = None,
    long_first: Annotated[
        bool, typer.Option(help="--endpoint: also run the seed's literal order (long request first).")
    ] = True,
    priorities: Annotated[
        bool,
        typer.Option(
            help="--endpoint: send shorts at priority 1, the long at 10 (priority-policy backends)."
        ),
    ] = False,
) -> None:
    """Does routing long requests away from KV pressure cut short requests' p95 TTFT? (second seed)"""
    from rich.progress import Progress

    from flatshare.admission.command import EndpointOptions
    from flatshare.admission.command import experiment_admission as run_admission

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

    with Progress() as progress:
        task = progress.add_task("admission runs", total=None)

        def advance(done: int, total: int) -> None:
            progress.update(task, completed=done, total=total)

        try:
            summary = run_admission(
                out,
                quick=quick,
                engines=engines,
                seeds=seeds,
                windows=windows,
                traces=traces,
                sharegpt=sharegpt,
                endpoint=endpoint,
                workers=workers,
                on_progress=advance,
                endpoint_options=options,
            )
        except InputError as exc:
            fail(str(exc))
    typer.echo(f"report: {out / 'report.md'}  summary: {out / 'summary.json'}  ({summary['wall_s']} s)")


@app.command()
def report(
    out: Annotated[Path, typer.Argument(help="An experiment folder with runs/ inside.")],
) -> None:
    """Rebuild summary.json, report.md and the figures of an experiment from its saved runs."""
    from flatshare.analysis.report import build_report

    if not (out / "runs").is_dir():
        fail(f"{out}: no runs/ folder (not an experiment output)")
    from flatshare.admission.runs import is_admission_experiment

    if is_admission_experiment(out):
        from flatshare.admission.report import build_report as build_admission_report

        build_admission_report(out)
        typer.echo(f"report: {out / 'report.md'}")
        return
    build_report(out)
    typer.echo(f"report: {out / 'report.md'}")
