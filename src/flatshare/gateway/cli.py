"""`flatshare gateway` and `flatshare calibrate`: plain functions with typer annotations.

Register them on the main app with `app.command("gateway")(gateway)` and
`app.command("calibrate")(calibrate)`; `python -m flatshare.gateway` runs them on its own small app.
Options map onto the config file's keys (`--backend` replaces the file's `backends`; the others replace
the key of the same name), so there is one source of truth (`config.py`). Bad settings print one line
`error: ...` and exit with code 2.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer

from flatshare.errors import InputError


def _fail(message: str) -> NoReturn:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code=2)


def backend_entry(text: str) -> dict[str, str]:
    """`URL` or `NAME=URL` as a `backends` table entry."""
    name, sep, url = text.partition("=")
    if sep and not name.startswith(("http://", "https://")):
        return {"name": name, "url": url}
    return {"url": text}


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
) -> None:
    """An OpenAI-compatible gateway over several vLLM servers that routes long requests away from KV pressure."""
    from flatshare.gateway.configfile import load_config

    overrides: dict[str, Any] = {
        "backends": [backend_entry(b) for b in backend] if backend else None,
        "port": port,
        "host": host,
        "policy": policy,
        "audit_log": str(audit_log) if audit_log is not None else None,
        "admin_token": admin_token,
    }
    try:
        settings = load_config(config, overrides)
    except InputError as exc:
        _fail(str(exc))
    from flatshare.gateway.server import gateway_main

    gateway_main(settings)


def calibrate(
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
    from flatshare.gateway.calibrate import calibrate_thresholds, load_samples
    from flatshare.gateway.config import ThresholdConfig
    from flatshare.gateway.configfile import build, read_mapping, save_thresholds

    try:
        source = ", ".join(str(p) for p in run)
        result = calibrate_thresholds(load_samples(run), fraction, input_percentile, kv_percentile, source)
        if config is not None:
            if not config.exists():
                raise InputError(f"{config}: no such config file")
            save_thresholds(config, result.thresholds)
            build(ThresholdConfig, read_mapping(config).get("thresholds"), str(config), "thresholds")
    except InputError as exc:
        _fail(str(exc))
    t = result.thresholds
    typer.echo(
        f"# from {result.token_samples} requests and {result.kv_samples} KV readings up to t={result.cutoff_t:.3f}"
    )
    typer.echo(f"[thresholds]\nkv_usage = {t.kv_usage}\ninput_tokens = {t.input_tokens}")
    typer.echo(f"calibrated_from = {json.dumps(source)}")
    if config is not None:
        typer.echo(f"# saved into {config}")
