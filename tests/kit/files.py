"""Hostile files for the file commands' tests: a planted symlink, and the check that a command refused its
input the CLI's way (one line starting `error: `, exit 2, no traceback)."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import Result

from flatshare.runfiles.records import ReplayRecord, write_records

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


# -- a small co-location experiment's saved run ----------------------------------------------------------
SAMPLE = {
    "engine": "sim0",
    "kv_usage": 0.2,
    "running": 1,
    "waiting": 0,
    "preemptions_total": 0,
    "cpu_tier_blocks": 0,
}
FACTS = {"duration_s": 100.0, "preemptions": 1, "scheduler_counters": {}}


def _voice(i: int, first_sentence_after: float) -> ReplayRecord:
    send = 10.0 * i
    times = [send + first_sentence_after * k / 3 for k in (1, 2, 3)]
    return ReplayRecord(f"v{i}", "call", "voice", 0, 100, 3, "sim0", send, 3, times, times[-1], "length")


def save_colocation_run(root: Path, condition: str, wait: float, callers: str = "c2") -> Path:
    """A co-location run folder (`runs/<condition>/<callers>/s0`) of ten voice turns whose first sentence
    takes `wait` s, five engine samples and the facts the analysis reads."""
    folder = root / "runs" / condition / callers / "s0"
    folder.mkdir(parents=True)
    write_records(folder / "requests.jsonl", [_voice(i, wait) for i in range(10)])
    rows = [json.dumps(SAMPLE | {"t": float(t)}) + "\n" for t in range(5)]
    (folder / "samples.jsonl").write_text("".join(rows))
    (folder / "engine.json").write_text(json.dumps(FACTS))
    return folder
