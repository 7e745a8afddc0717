"""The root `flatshare` app, its error exit, and the `--verbose` switch every command shares."""

from __future__ import annotations

from typing import Annotated, NoReturn

import typer

from flatshare import enginelog

app = typer.Typer(
    name="flatshare",
    help=(
        "Share vLLM GPUs between latency-critical requests (voice turns, short chats) and heavy agent "
        "traffic: a scheduler plug-in (make-room), a simulated engine built on vLLM's own scheduler, and "
        "honest measurement."
    ),
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode=None,  # option help quotes defaults in [brackets]: print them, not parse them
)
experiment_app = typer.Typer(
    help="Experiments on the simulated engine (or real endpoints).",
    no_args_is_help=True,
    rich_markup_mode=None,
)
app.add_typer(experiment_app, name="experiment")


@app.callback()
def _root(
    verbose: Annotated[
        bool,
        typer.Option(
            "--verbose",
            envvar="FLATSHARE_VERBOSE",
            help="Show vLLM's and torch's own log lines on stderr (default: OUT/engine.log).",
        ),
    ] = False,
) -> None:
    """Share vLLM GPUs between latency-critical requests and heavy agent traffic."""
    if not verbose:
        enginelog.quiet()


AccessLogOpt = Annotated[
    str,
    typer.Option(
        help="requests: log every request but the poll routes (/metrics, /health, /v1/models); all; off."
    ),
]


def fail(message: str) -> NoReturn:
    """Print a one-line error and exit with code 2."""
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code=2)
