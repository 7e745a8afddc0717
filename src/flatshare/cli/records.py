"""`flatshare records upgrade IN OUT`: an old request record file (either kind of version 1) to the
current format (`flatshare.runfiles.upgrade`; the format: docs/records.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from flatshare.cli.base import app, fail
from flatshare.errors import InputError

records_app = typer.Typer(
    help="Request record files (requests.jsonl; docs/records.md).",
    no_args_is_help=True,
    rich_markup_mode=None,
)
app.add_typer(records_app, name="records")


@records_app.command()
def upgrade(
    source: Annotated[
        Path, typer.Argument(metavar="IN", help="An old requests.jsonl (version 1, either kind).")
    ],
    target: Annotated[Path, typer.Argument(metavar="OUT", help="Where to write the upgraded file (not IN).")],
) -> None:
    """Rewrite a record file of version 1 (`flatshare sim`'s or the replay's) in the current format."""
    from flatshare.runfiles.records import RECORD_VERSION
    from flatshare.runfiles.upgrade import upgrade_file

    try:
        kinds = upgrade_file(source, target)
    except InputError as exc:
        fail(str(exc))
    counts = ", ".join(f"{n} of {kind}" for kind, n in kinds.items()) or "none"
    typer.echo(f"wrote {sum(kinds.values())} records of version {RECORD_VERSION} to {target} ({counts})")
