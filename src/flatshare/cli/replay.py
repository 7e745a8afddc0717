"""`flatshare replay`: a workload against OpenAI-compatible endpoints (wall clock) or simulated engines."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from flatshare.cli.base import app, fail
from flatshare.cli.engine_options import ENGINE, with_engine_options
from flatshare.errors import InputError
from flatshare.replay.verdict import verdict
from flatshare.sim.options import EngineOptions


@app.command()
@with_engine_options(own=("max_model_len",))
def replay(
    workload: Annotated[str, typer.Option(help="Workload spec: voice-agents:callers=2, weka:PATH, ...")],
    out: Annotated[Path, typer.Option(help="Output folder: requests.jsonl, samples.jsonl, run.json.")],
    endpoint: Annotated[
        list[str] | None, typer.Option(help="Base URL of an OpenAI-compatible server (repeat for several).")
    ] = None,
    sim: Annotated[bool, typer.Option("--sim", help="Replay on simulated engines, in virtual time.")] = False,
    seed: Annotated[int, typer.Option(help="Seed the workload is drawn with.")] = 0,
    duration: Annotated[float, typer.Option(help="Issue nothing after this many seconds (0: all).")] = 0.0,
    max_concurrency: Annotated[int, typer.Option(help="Most requests in flight at once.")] = 256,
    grace: Annotated[float, typer.Option(help="Seconds requests may run past --duration.")] = 30.0,
    vocab_size: Annotated[int, typer.Option(help="Prompt token ids lie below this (the model's).")] = 32000,
    priority: Annotated[bool, typer.Option(help="Send each request's priority field.")] = True,
    sim_engines: Annotated[int, typer.Option(help="Simulated engines for --sim.")] = 1,
    max_model_len: Annotated[
        int | None,
        typer.Option(help="Clip prompts to this [the --sim engine's, or what the endpoints report]."),
    ] = ENGINE.max_model_len,
    max_failed: Annotated[
        float,
        typer.Option(
            min=0.0,
            max=1.0,
            metavar="FRACTION",
            help="Share of requests that may fail before the command exits 1 (0: none may).",
        ),
    ] = 0.0,
    *,
    engine: EngineOptions,
) -> None:
    """Replay a workload against OpenAI-compatible endpoints (wall clock) or simulated engines (--sim).
    Exits 1 when more than --max-failed of the requests failed (the records are written all the same)."""
    from flatshare.replay.command import replay_command

    try:
        summary = replay_command(
            workload, out, endpoints=endpoint or [], sim=sim, seed=seed, duration=duration,
            max_concurrency=max_concurrency, grace=grace, max_model_len=max_model_len,
            vocab_size=vocab_size, priority=priority, sim_engines=sim_engines, engine=engine,
        )  # fmt: skip
    except InputError as exc:
        fail(str(exc))
    typer.echo(summary.line())
    if summary.interrupted:
        raise typer.Exit(code=130)
    outcome = verdict(summary.run, max_failed)
    for line in outcome.sample_lines():
        typer.echo(f"warning: {line}", err=True)
    if outcome.failed:
        typer.echo(f"{'warning' if outcome.passed else 'error'}: {outcome.failure_line()}", err=True)
    if not outcome.passed:
        raise typer.Exit(code=1)
