"""Hostile files for the file commands' tests: a planted symlink, and the check that a command refused its
input the CLI's way (one line starting `error: `, exit 2, no traceback)."""

from __future__ import annotations

from pathlib import Path

from click.testing import Result

VICTIM_TEXT = "a file outside the output folder\n"


def refused(result: Result, *words: str) -> str:
    """The one-line message of a refusal: exit 2, `error: ...`, no exception; each of `words` in it."""
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.output
    for word in words:
        assert word in lines[0], lines[0]
    return lines[0]


def plant(link: Path, victim: Path) -> Path:
    """A symlink at `link` to `victim`, a file outside the output folder holding `VICTIM_TEXT`."""
    victim.parent.mkdir(parents=True, exist_ok=True)
    victim.write_text(VICTIM_TEXT)
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(victim)
    return link


def untouched(victim: Path, link: Path | None = None) -> None:
    """`victim` still holds `VICTIM_TEXT`; `link`, when given, is no longer a symlink (replaced) or gone."""
    assert victim.read_text() == VICTIM_TEXT
    if link is not None:
        assert not link.is_symlink()
