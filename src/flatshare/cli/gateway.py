"""`flatshare gateway` and `flatshare calibrate-thresholds` (bodies in `flatshare.gateway.command`).

`python -m flatshare.gateway` runs these two commands on a small app of their own.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from flatshare.cli.base import AccessLogOpt, app, fail
from flatshare.errors import InputError


@app.command()
def gateway(
    backend: Annotated[
        list[str] | None,
        typer.Option(help="Backend base URL (or NAME=URL); repeat for more. Replaces the file's."),
    ] = None,
    port: Annotated[int | None, typer.Option(help="Port to listen on (default 8080).")] = None,
    host: Annotated[str | None, typer.Option(help="Address to bind (default 127.0.0.1).")] = None,
    policy: Annotated[
        str | None,
        typer.Option(
            help="threshold, round-robin, least-kv, least-waiting, random or first (default threshold)."
        ),
    ] = None,
    config: Annotated[Path | None, typer.Option(help="Config file, TOML or JSON (docs/gateway.md).")] = None,
    audit_log: Annotated[
        Path | None, typer.Option(help="Append one JSON line per routing decision here.")
    ] = None,
    admin_token: Annotated[
        str | None,
        typer.Option(
            envvar="FLATSHARE_ADMIN_TOKEN",
            show_envvar=True,
            help="Enables PUT /gateway/routing for clients bearing this token (at least 16 characters; "
            "prefer the environment variable, which other users cannot see in the process list).",
        ),
    ] = None,
    access_log: AccessLogOpt = "off",
) -> None:
    """An OpenAI-compatible gateway over several vLLM servers that routes long requests away from KV pressure."""
    from flatshare.gateway.command import gateway_command

    try:
        gateway_command(
            backends=backend or (), port=port, host=host, policy=policy, config=config,
            audit_log=audit_log, admin_token=admin_token, access_log=access_log,
        )  # fmt: skip
    except InputError as exc:
        fail(str(exc))


@app.command("calibrate-thresholds")
def calibrate_thresholds(
    run: Annotated[
        list[Path],
        typer.Argument(
            help="Recorded run: gateway audit log, requests/samples JSONL, or a simulator output folder."
        ),
    ],
    fraction: Annotated[float, typer.Option(help="Leading part of the run (by time) to read.")] = 0.2,
    input_percentile: Annotated[
        float, typer.Option(help="Percentile of input tokens for that threshold.")
    ] = 90.0,
    kv_percentile: Annotated[float, typer.Option(help="Percentile of KV use for that threshold.")] = 80.0,
    config: Annotated[
        Path | None, typer.Option(help="Save the thresholds into this config file's [thresholds] table.")
    ] = None,
) -> None:
    """Threshold-rule thresholds from the first 20% of a recorded run (the rule: docs/gateway.md)."""
    from flatshare.gateway.command import calibrate_command

    try:
        summary = calibrate_command(
            run, fraction=fraction, input_percentile=input_percentile, kv_percentile=kv_percentile,
            config=config,
        )  # fmt: skip
    except InputError as exc:
        fail(str(exc))
    for line in summary.lines():
        typer.echo(line)
