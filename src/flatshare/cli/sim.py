"""`flatshare sim`, `serve-sim` and `probe` (bodies in `flatshare.sim.command` and `flatshare.probe`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from flatshare.cli.base import AccessLogOpt, app, fail
from flatshare.cli.engine_options import ENGINE, ProfileOpt, SeedOpt, with_engine_options
from flatshare.errors import InputError
from flatshare.sim.options import EngineOptions


@app.command()
@with_engine_options()
def sim(
    requests: Annotated[Path, typer.Option(help="Request file, JSONL (see docs/formats.md).")],
    out: Annotated[Path, typer.Option(help="Output folder: requests.jsonl, samples.jsonl, summary.json.")],
    seed: SeedOpt = 0,
    *,
    engine: EngineOptions,
) -> None:
    """Run requests through vLLM's scheduler on a virtual clock and write per-request records."""
    from flatshare.sim.command import sim_command

    try:
        summary = sim_command(requests, out, engine, seed)
    except InputError as exc:
        fail(str(exc))
    typer.echo(summary.line())


@app.command("serve-sim")
@with_engine_options()
def serve_sim(
    port: Annotated[int, typer.Option(help="Port to listen on.")] = 8000,
    host: Annotated[str, typer.Option(help="Address to bind (loopback by default).")] = "127.0.0.1",
    model_name: Annotated[str, typer.Option(help="Model name served on /v1/models.")] = "sim",
    speed: Annotated[float, typer.Option(help="Virtual seconds per wall second (>= 1).")] = 1.0,
    seed: SeedOpt = 0,
    access_log: AccessLogOpt = "requests",
    *,
    engine: EngineOptions,
) -> None:
    """The simulated engine behind a real OpenAI-compatible server (wall-clock time, vLLM's /metrics)."""
    from flatshare.serve.command import serve_sim_command

    try:
        serve_sim_command(port, host, model_name, speed, engine, seed, access_log)
    except InputError as exc:
        fail(str(exc))


@app.command()
def probe(
    out: Annotated[Path, typer.Option(help="Output folder for each case's records.")] = Path("out/probe"),
    profile: ProfileOpt = ENGINE.profile,
) -> None:
    """The write-up's probe on the simulated engine: one voice turn beside two agents that fill the KV cache
    (the main job is `flatshare experiment colocation`)."""
    from rich.console import Console
    from rich.table import Table

    from flatshare.probe import run_probe

    try:
        step_profile, rows = run_probe(out, profile)
    except InputError as exc:
        fail(str(exc))
    table = Table(title=f"voice turn beside two 16k-token agents (simulated, profile {step_profile.name})")
    table.add_column("case", no_wrap=True)
    for column in ("KV use at arrival", "voice TTFT s", "voice reply done s", "preemptions"):
        table.add_column(column)
    for row in rows:
        table.add_row(
            row.key,
            f"{row.kv_at_arrival:.0%}",
            f"{row.voice_ttft_s:.2f}",
            f"{row.voice_finish_s:.2f}",
            str(row.preemptions),
        )
    Console().print(table)
    typer.echo(f"records, samples and summaries: {out}/<case>/")
