"""Output folders and the JSON/JSONL files inside them, written atomically.

`atomic_folder(target)` hands out an empty folder beside `target` (`.<name>.<unique>.tmp`, hidden, so
loaders globbing `s*` never see it); when the block ends without error it takes `target`'s place by a
rename, so `target` is always absent or complete: a crashed run leaves no half-written folder (at most a
hidden temp folder, which is removed on error when the process lives to do it). A folder already at
`target` (an earlier run of the same job) is replaced.

`check_out` / `prepare` check (and make) a command's `--out` folder before any work is done.

Single files are written by `flatshare.safeout` (a temp file created exclusively, then renamed: never
through a planted symlink). Reading is bounded (`flatshare.jsonin`): `read_json` / `read_jsonl` give an
InputError naming the file and line for a file that is missing, too large, not JSON, or not objects.
"""

from __future__ import annotations

import json
import os
import shutil
import uuid
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

from flatshare import jsonin, safeout
from flatshare.errors import InputError


def check_out(out: Path) -> None:
    """InputError if `--out` names something that is not a folder (checked before any work is done)."""
    if out.exists() and not out.is_dir():
        raise InputError(f"--out {out}: exists and is not a folder")
    above = next((p for p in out.parents if p.exists()), None)
    if above is not None and not above.is_dir():
        raise InputError(f"--out {out}: {above} is not a folder")


def prepare(out: Path) -> Path:
    """Make the output folder (InputError if it is a file or cannot be made)."""
    check_out(out)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError(f"--out {out}: cannot create it ({exc.strerror})") from exc
    return out


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


def row_lines(rows: Iterable[dict[str, Any]]) -> Iterator[str]:
    """One JSON object a line, keys sorted: the style of every `.jsonl` file of a run."""
    for row in rows:
        yield json.dumps(row, sort_keys=True) + "\n"


def write_jsonl(path: Path, rows: Iterable[dict[str, Any]]) -> None:
    """`rows` as `row_lines`, atomically and safely (`write_atomic`)."""
    write_atomic(path, lambda f: f.writelines(row_lines(rows)))


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """One JSON object a line, within `flatshare.jsonin`'s limits (InputError naming the file and line)."""
    rows = []
    for where, line in jsonin.read_lines(path):
        row = jsonin.loads(line, where)
        if not isinstance(row, dict):
            raise InputError(f"{where}: must be a JSON object, not {type(row).__name__}")
        rows.append(row)
    return rows


def write_atomic(path: Path, write: Callable[[IO[str]], object]) -> None:
    """Call `write` on a text file that becomes `path` only when complete (`flatshare.safeout`): `path` is
    either untouched or complete, also after an error or Ctrl-C, and a symlink planted at `path` or at any
    temporary name is never written through."""
    safeout.write_file(path, write)
