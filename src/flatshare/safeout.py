"""Writing a command's output files safely: validate first, then write each file whole or not at all, and
never through a file planted at (or beside) the target.

`write_file(path, write)` calls `write` with a file object open on a temporary file that `tempfile.mkstemp`
created in `path`'s folder (`O_CREAT | O_EXCL`: a symlink or file already at that name is never opened,
and the name is random, so one cannot be planted there in advance), then renames it onto `path` with
`os.replace`. A rename replaces the entry at `path` itself: a symlink planted there is replaced by the new
file, and whatever it pointed at is never opened. `path` is therefore either untouched or complete, also
after an error or Ctrl-C (the temporary file is removed). A folder at `path` is refused.

The new file gets the mode a plain `open(path, "w")` would give it (0666 less the umask). Every failure is an
`InputError` naming the path (the CLI's one-line error, exit 2). Callers validate all their input before the
first write, so a refused input leaves the output folder as it was.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from flatshare.errors import InputError


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def check_target(path: Path) -> None:
    """InputError when `path` cannot be an output file: a folder is there, or its folder is a file."""
    if path.is_dir() and not path.is_symlink():
        raise InputError(f"{path}: is a folder, not a file")
    parent = path.parent
    if parent.exists() and not parent.is_dir():
        raise InputError(f"{path}: {parent} is not a folder")


def write_file(path: Path, write: Callable[[IO[Any]], object], *, binary: bool = False) -> None:
    """Call `write(f)` on a fresh temporary file beside `path`, then rename it onto `path` (module doc)."""
    check_target(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name[:64]}.", suffix=".tmp")
    except OSError as exc:
        raise InputError(f"{path}: cannot write it ({exc.strerror or exc})") from exc
    try:
        os.fchmod(fd, 0o666 & ~_umask())
        with open(fd, "wb" if binary else "w", encoding=None if binary else "utf-8") as f:
            write(f)
        os.replace(tmp, path)
    except OSError as exc:
        raise InputError(f"{path}: cannot write it ({exc.strerror or exc})") from exc
    finally:
        Path(tmp).unlink(missing_ok=True)


def write_text(path: Path, text: str) -> None:
    """`text` (UTF-8) into `path`, safely (module doc)."""
    write_file(path, lambda f: f.write(text))


def write_bytes(path: Path, data: bytes) -> None:
    """`data` into `path`, safely (module doc)."""
    write_file(path, lambda f: f.write(data), binary=True)


def save_figure(figure: Any, path: Path, **options: Any) -> None:
    """A matplotlib figure as `path` (its format from the suffix), safely (module doc)."""
    fmt = path.suffix.lstrip(".").lower() or "png"
    write_file(path, lambda f: figure.savefig(f, format=fmt, **options), binary=True)
