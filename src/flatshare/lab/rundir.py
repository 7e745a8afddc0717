"""Run folders written atomically, and the JSON/JSONL files inside them.

`atomic_folder(target)` hands out an empty folder beside `target` (`.<name>.<unique>.tmp`, hidden, so
loaders globbing `s*` never see it); when the block ends without error it takes `target`'s place by a
rename, so `target` is always absent or complete: a crashed run leaves no half-written folder (at most a
hidden temp folder, which is removed on error when the process lives to do it). A folder already at
`target` (an earlier run of the same job) is replaced.
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
    """Write `data` as `json_text`, atomically (a temp file beside `path`, then a rename)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = _beside(path, "tmp")
    tmp.write_text(json_text(data))
    tmp.replace(path)


def read_json(path: Path) -> Any:
    return json.loads(path.read_text())


def write_jsonl(path: Path, rows: Iterable[dict[str, Any]]) -> None:
    """One JSON object a line, keys sorted (meant for files inside an `atomic_folder`)."""
    with path.open("w") as f:
        for row in rows:
            f.write(json.dumps(row, sort_keys=True) + "\n")


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
