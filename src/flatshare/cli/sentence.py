"""`flatshare sentence-ids` (body in `flatshare.protocol.sentence_ends`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from flatshare.cli.base import app, fail


@app.command("sentence-ids")
def sentence_ids(
    model: Annotated[
        Path, typer.Argument(help="A local model folder (its tokenizer files), as vLLM serves it.")
    ],
) -> None:
    """Print, as a JSON list, the token ids that end a sentence in MODEL's vocabulary: make-room's
    `sentence_end_token_ids`. Exits 2 when the folder has no tokenizer."""
    from flatshare.protocol.sentence_ends import sentence_end_ids, tokenizer_tokens

    if not model.is_dir():
        fail(f"{model}: not a folder (give the local model folder vLLM serves)")
    try:
        tokens = tokenizer_tokens(model)
    except (OSError, ValueError) as exc:
        fail(f"{model}: no tokenizer could be loaded: {exc}")
    ids = sentence_end_ids(tokens)
    if not ids:
        fail(f"{model}: no token of its vocabulary ends a sentence")
    typer.echo(json.dumps(ids))
