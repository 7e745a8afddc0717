"""Run folders written atomically, and the JSON/JSONL files inside them.

`atomic_folder(target)` hands out an empty folder beside `target` (`.<name>.<unique>.tmp`, hidden, so
loaders globbing `s*` never see it); when the block ends without error it takes `target`'s place by a
rename, so `target` is always absent or complete: a crashed run leaves no half-written folder (at most a
hidden temp folder, which is removed on error when the process lives to do it). A folder already at
`target` (an earlier run of the same job) is replaced.

Single files are written by `flatshare.safeout` (a temp file created exclusively, then renamed: never
through a planted symlink). Reading is bounded (`flatshare.jsonin`): `read_json` / `read_jsonl` give an
InputError naming the file and line for a file that is missing, too large, not JSON, or not objects.
"""

from __future__ import annotations

import json
import os
import shutil
import uuid
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from flatshare import jsonin, safeout
from flatshare.errors import InputError


def _beside(target: Path, tag: str) -> Path:
    return target.parent / f".{target.name}.{os.getpid()}-{uuid.uuid4().hex[:12]}.{tag}"


@contextmanager
def atomic_folder(target: Path) -> Iterator[Path]:
    """Yield a fresh temp folder beside `target`; on success rename it to `target` (see the module doc)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = _beside(target, "tmp")
    tmp.mkdir()
    try:
        yield tmp
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    old = _beside(target, "old")
    if target.exists():
        target.rename(old)
    tmp.rename(target)
    shutil.rmtree(old, ignore_errors=True)


def json_text(data: Any) -> str:
    """The one JSON style of saved files: 2-space indent, sorted keys, a final newline."""
    return json.dumps(data, indent=2, sort_keys=True) + "\n"


def write_json(path: Path, data: Any) -> None:
    """Write `data` as `json_text`, atomically and safely (`flatshare.safeout`)."""
    safeout.write_text(path, json_text(data))


def read_json(path: Path) -> dict[str, Any]:
    """A JSON file holding an object, read within `flatshare.jsonin`'s limits (InputError otherwise)."""
    return jsonin.read_object(path)


def write_jsonl(path: Path, rows: Iterable[dict[str, Any]]) -> None:
    """One JSON object a line, keys sorted (meant for files inside an `atomic_folder`)."""
    with path.open("w") as f:
        for row in rows:
            f.write(json.dumps(row, sort_keys=True) + "\n")


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """One JSON object a line, within `flatshare.jsonin`'s limits (InputError naming the file and line)."""
    rows = []
    for where, line in jsonin.read_lines(path):
        row = jsonin.loads(line, where)
        if not isinstance(row, dict):
            raise InputError(f"{where}: must be a JSON object, not {type(row).__name__}")
        rows.append(row)
    return rows
