"""The root `flatshare` app, its error exit, and helpers every command module uses."""

from __future__ import annotations

import json
from typing import NoReturn

import typer

from flatshare.errors import InputError

app = typer.Typer(
    name="flatshare",
    help=(
        "Share vLLM GPUs between latency-critical requests (voice turns, short chats) and heavy agent "
        "traffic: a scheduler plug-in (make-room), a simulated engine built on vLLM's own scheduler, and "
        "honest measurement."
    ),
    no_args_is_help=True,
    add_completion=False,
)
experiment_app = typer.Typer(
    help="Experiments on the simulated engine (or real endpoints).", no_args_is_help=True
)
app.add_typer(experiment_app, name="experiment")


@app.callback()
def _root() -> None:
    """Share vLLM GPUs between latency-critical requests and heavy agent traffic."""


def fail(message: str) -> NoReturn:
    """Print a one-line error and exit with code 2."""
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code=2)


def parse_json_object(text: str, option: str) -> dict[str, object]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(f"{option}: not valid JSON ({exc.msg})") from exc
    if not isinstance(value, dict):
        raise InputError(f"{option}: must be a JSON object")
    return value
