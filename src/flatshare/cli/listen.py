"""`flatshare listen RUN_DIR --call N [--turns 1,10] [--compare OTHER_RUN_DIR] --out call.wav`: hear one
voice call of a saved run, every wait as the run measured it (`flatshare.listen`), and see it (call.png)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from flatshare.cli.base import app, fail
from flatshare.errors import InputError


@app.command()
def listen(
    run_dir: Annotated[
        Path,
        typer.Argument(
            metavar="RUN_DIR",
            help="A run folder: a co-location run (runs/<condition>/c<callers>/s<seed>) or a replay's --out.",
        ),
    ],
    out: Annotated[Path, typer.Option(help="The wav to write; the figure goes beside it (.png).")],
    call: Annotated[int, typer.Option(help="The call, from 1, of the caller line.")] = 1,
    caller: Annotated[int, typer.Option(help="The caller line, as in the session id voice/0.")] = 0,
    turns: Annotated[
        str | None, typer.Option(help="Turns of the call, from 1, comma-separated [every turn sent].")
    ] = None,
    compare: Annotated[
        Path | None,
        typer.Option(help="Another run of the same workload (another condition): the right stereo channel."),
    ] = None,
    rate: Annotated[int, typer.Option(help="Samples a second (8000: a phone line).")] = 16_000,
    bits: Annotated[int, typer.Option(help="Bits a sample: 16, or 8 for half the size.")] = 16,
) -> None:
    """A call of a saved run as speech (espeak-ng), the silence before each reply exactly the run's wait."""
    from flatshare.listen.render import render_call

    if bits not in (8, 16):
        fail(f"--bits {bits}: must be 8 or 16")
    if call < 1 or caller < 0:
        fail("--call counts from 1 and --caller from 0")
    try:
        chosen = _turns(turns)
        done = render_call(run_dir, caller, call, out, turns=chosen, compare=compare, rate=rate, bits=bits)
    except InputError as exc:
        fail(str(exc))
    sides = ("left", "right")
    for side, timeline in zip(sides, done.timelines, strict=False):
        waits = ", ".join(f"turn {t.turn} {t.wait_s:.2f} s" for t in timeline.turns)
        typer.echo(f"{side}: {timeline.label}: {timeline.length_s:.1f} s; waits: {waits}")
    typer.echo(f"wrote {done.wav} and {done.png}")


def _turns(text: str | None) -> list[int] | None:
    if text is None:
        return None
    try:
        values = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise InputError(f"--turns {text!r}: expected turn numbers from 1, comma-separated") from None
    if not values or min(values) < 1:
        raise InputError(f"--turns {text!r}: expected turn numbers from 1, comma-separated")
    return values
