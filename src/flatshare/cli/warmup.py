"""`flatshare warmup` (body in `flatshare.warmup`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from flatshare.cli.base import app, fail
from flatshare.errors import InputError


@app.command()
def warmup(
    endpoint: Annotated[str, typer.Option(help="The server's base URL (vLLM, serve-sim or the gateway).")],
    prompt_file: Annotated[
        list[Path] | None, typer.Option(help="A protected system prompt's text (repeat for several).")
    ] = None,
    workload: Annotated[
        str | None, typer.Option(help="A workload spec: its protected requests' shared prefixes.")
    ] = None,
    api: Annotated[
        str, typer.Option(help="For --prompt-file: chat (a system message) or completions.")
    ] = "chat",
    model: Annotated[str | None, typer.Option(help="Model name [the server's first].")] = None,
    priority: Annotated[
        int | None, typer.Option(help="For --prompt-file: the requests' vLLM priority [none sent].")
    ] = None,
    protect_priority: Annotated[
        int, typer.Option(help="For --workload: requests at or below this priority are protected.")
    ] = 0,
    seed: Annotated[int, typer.Option(help="For --workload: its seed.")] = 0,
    vocab_size: Annotated[
        int, typer.Option(help="For --workload: token ids lie below this (as `flatshare replay`'s).")
    ] = 32000,
) -> None:
    """Load each protected prefix (a voice agent's system prompt) into the server's cache before traffic:
    one request each, max_tokens 1. Exits 2 if any fails."""
    from flatshare.warmup import file_prompts, warm, workload_prompts

    try:
        if bool(prompt_file) == (workload is not None):
            raise InputError("give --prompt-file (one or more) or --workload, not both")
        if api not in ("chat", "completions"):
            raise InputError(f"--api must be chat or completions, got {api!r}")
        if prompt_file:
            prompts = file_prompts(prompt_file, "chat" if api == "chat" else "completions", priority)
        else:
            assert workload is not None
            prompts = workload_prompts(workload, seed, vocab_size, protect_priority)
        for result in warm(endpoint, prompts, model):
            typer.echo(result.line())
    except InputError as exc:
        fail(str(exc))
