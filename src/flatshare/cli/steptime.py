"""`flatshare step-time`: one step's time and its parts under any profile, to hold it against a measurement."""

from __future__ import annotations

import json
import re
from typing import Annotated

import typer

from flatshare.cli.base import app, fail
from flatshare.errors import InputError

_DECODE = re.compile(r"(\d+)x(\d+)")
_PREFILL = re.compile(r"(\d+)@(\d+)")
_MOST = 10_000_000  # tokens or requests in one term: far past any step, small enough to price at once


def parse_work(decodes: list[str], prefills: list[str]) -> list[object]:
    """`MxC` (M decodes at context C) and `N@C` (an N-token chunk at context C) as scheduled work."""
    from flatshare.sim.profile import ScheduledWork

    work: list[object] = []
    for text in decodes:
        m = _DECODE.fullmatch(text.strip())
        if not m:
            raise InputError(f"--decode {text!r}: expected MxC (M decodes at context C), e.g. 24x12000")
        count, context = int(m[1]), int(m[2])
        if not 1 <= count <= _MOST or context > _MOST:
            raise InputError(f"--decode {text!r}: M must be in 1..{_MOST:,} and C at most {_MOST:,}")
        work += [ScheduledWork(1, context, True)] * count
    for text in prefills:
        m = _PREFILL.fullmatch(text.strip())
        if not m:
            raise InputError(
                f"--prefill {text!r}: expected N@C (an N-token chunk at context C), e.g. 64@4000"
            )
        tokens, context = int(m[1]), int(m[2])
        if not 1 <= tokens <= _MOST or context > _MOST:
            raise InputError(f"--prefill {text!r}: N must be in 1..{_MOST:,} and C at most {_MOST:,}")
        work.append(ScheduledWork(tokens, context, False))
    if not work:
        raise InputError("give at least one --decode MxC or --prefill N@C")
    return work


@app.command("step-time")
def step_time(
    profile: Annotated[str, typer.Option(help="A shipped profile's name or a profile file (.json).")] = "",
    decode: Annotated[
        list[str] | None, typer.Option(help="M decodes at context C, as MxC (repeatable): 24x12000.")
    ] = None,
    prefill: Annotated[
        list[str] | None, typer.Option(help="A chunk of N tokens at context C, as N@C (repeatable): 64@4000.")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Price one step of decodes and prefill chunks: its time and its parts (linear, attention, fixed)."""
    from flatshare.sim.profile import DEFAULT_PROFILE, ScheduledWork, load_profile

    try:
        step_profile = load_profile(profile or DEFAULT_PROFILE)
        work = [w for w in parse_work(decode or [], prefill or []) if isinstance(w, ScheduledWork)]
    except InputError as exc:
        fail(str(exc))
    parts = step_profile.step_parts(work)
    total = step_profile.step_time(work)
    tokens = sum(w.tokens for w in work)
    if as_json:
        body = {
            "total_s": total,
            "parts": {
                "linear_s": parts.linear_s,
                "attention_s": parts.attention_s,
                "fixed_s": parts.fixed_s,
                "prefill_attention_s": parts.prefill_attention_s,
                "decode_attention_s": parts.decode_attention_s,
            },
            "profile": step_profile.name,
            "model": step_profile.model,
            "tokens": tokens,
        }
        typer.echo(json.dumps(body))
        return
    typer.echo(
        f"{step_profile.name} ({step_profile.model}): {tokens:,} tokens in the pass, {total * 1e3:.2f} ms"
    )
    typer.echo(f"  linear     {parts.linear_s * 1e3:9.2f} ms")
    typer.echo(
        f"  attention  {parts.attention_s * 1e3:9.2f} ms  (prefill {parts.prefill_attention_s * 1e3:.2f}, "
        f"decode {parts.decode_attention_s * 1e3:.2f})"
    )
    typer.echo(f"  fixed      {parts.fixed_s * 1e3:9.2f} ms")
