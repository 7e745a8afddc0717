"""The `flatshare` command line. Sub-commands import what they need when they run, so `--help`
and the commands that do not need vLLM never import it (importing vLLM takes ~9 s).

Each module of this package registers its commands on the root app when imported."""

from __future__ import annotations

import sys

import typer

from flatshare.cli import (  # noqa: F401  (registers the commands)
    colocation,
    experiments,
    fidelity,
    gateway,
    listen,
    records,
    replay,
    sentence,
    sim,
    steptime,
    warmup,
)
from flatshare.cli.base import app, fail
from flatshare.errors import InputError

__all__ = ["app", "fail", "main"]


def main() -> None:
    try:
        app()
    except InputError as exc:  # pragma: no cover - commands catch their own
        typer.echo(f"error: {exc}", err=True)
        sys.exit(2)
