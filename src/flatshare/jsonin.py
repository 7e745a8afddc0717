"""Reading JSON that a user, an operator or a client hands flatshare, with every limit checked up front.

Python's `json` accepts more than JSON and fails in ways a caller cannot read: `NaN`, `Infinity` and
`1e400` become non-finite floats (a simulation with an infinite arrival time never ends); an integer of
any length is converted (CPython refuses past 4,300 digits with a ValueError from deep inside); nesting
recurses once per level (about 1,000 levels raise RecursionError). `loads` turns each into an
`InputError` that names `where` (a file and line, an option); `read_text` does the same for a file that
cannot be read or is not UTF-8.

Limits: integers of at most `MAX_INT_DIGITS` digits (every 64-bit integer fits), finite floats, at most
`MAX_DEPTH` levels of nesting. Ranges (a count > 0, seconds below a bound) are the caller's to check.
`check_limits` applies the same limits to a value another parser decoded (a TOML file's table).

Files are read within bounds too (`/dev/zero` or a 50 GB file is an InputError, not a MemoryError):
`read_text` reads at most `MAX_FILE_BYTES`; `read_lines` streams a JSON-lines file, each line at most
`MAX_LINE_BYTES` and the file at most `MAX_LINES_FILE_BYTES`; `read_json` decodes a file of at most
`MAX_JSON_FILE_BYTES` and `read_object` also requires an object.

Checking every number in Python costs ten times what `json.loads` does on a document of numbers, so
`loads` does it only when a limit could be breached (`_may_breach_limits`); otherwise `json.loads`
decodes the same document to the same value.
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from flatshare.errors import InputError

MAX_INT_DIGITS = 20
MAX_DEPTH = 64
MAX_FILE_BYTES = 256 * 2**20
MAX_JSON_FILE_BYTES = 64 * 2**20
MAX_LINE_BYTES = 16 * 2**20
MAX_LINES_FILE_BYTES = 4 * 2**30
_SHAPE = bytes.maketrans(b"0123456789E", b"0000000000e")
_LONG_DIGITS = b"0" * (MAX_INT_DIGITS + 1)


class _Refused(ValueError):
    """A value JSON allows or Python accepts, refused here."""


def _parse_int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_INT_DIGITS:
        raise _Refused(f"an integer of {len(text.lstrip('-'))} digits (at most {MAX_INT_DIGITS})")
    return int(text)


def _parse_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _Refused(f"the number {text[:40]} is out of range")
    return value


def _parse_constant(name: str) -> float:
    raise _Refused(f"{name} is not a JSON number")


def _depth(value: Any) -> int:
    """The nesting depth of a decoded value (a scalar is 0), without recursion."""
    deepest, stack = 0, [(value, 0)]
    while stack:
        item, level = stack.pop()
        deepest = max(deepest, level)
        if isinstance(item, dict):
            stack.extend((v, level + 1) for v in item.values())
        elif isinstance(item, list):
            stack.extend((v, level + 1) for v in item)
    return deepest


def _may_breach_limits(raw: bytes) -> bool:
    """False only when no limit can be breached: nesting needs more than `MAX_DEPTH` brackets, a long
    integer (or a float that overflows by its digits) a run of more than `MAX_INT_DIGITS` digits, an
    overflowing float a positive exponent of three digits, and the rest the words NaN or Infinity.
    Substring searches over a copy with every digit as 0 (C speed; a regex costs as much as parsing)."""
    if raw.count(b"[") + raw.count(b"{") > MAX_DEPTH or b"NaN" in raw or b"Infinity" in raw:
        return True
    shape = raw.translate(_SHAPE)
    return _LONG_DIGITS in shape or b"e000" in shape or b"e+000" in shape


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    value = dict(pairs)
    if len(value) != len(pairs):
        seen: set[str] = set()
        twice = next(key for key, _ in pairs if key in seen or seen.add(key))  # type: ignore[func-returns-value]
        raise _Refused(f"the key {json.dumps(twice)[:80]} appears more than once in an object")
    return value


def loads(text: str | bytes, where: str, unique_keys: bool = False) -> Any:
    """Decode one JSON document within the module's limits; InputError naming `where` otherwise. With
    `unique_keys`, an object naming a key twice is refused too (JSON leaves which one counts to the reader:
    Python keeps the last, other readers the first)."""
    if isinstance(text, bytes):
        raw, text = text, decode_utf8(text, where)
    else:
        raw = text.encode("utf-8", "surrogatepass")
    pairs = _unique_keys if unique_keys else None
    try:
        if not _may_breach_limits(raw):
            return json.loads(text, object_pairs_hook=pairs)
        value = json.loads(
            text,
            parse_int=_parse_int,
            parse_float=_parse_float,
            parse_constant=_parse_constant,
            object_pairs_hook=pairs,
        )
    except json.JSONDecodeError as exc:
        raise InputError(
            f"{where}: not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})"
        ) from exc
    except _Refused as exc:
        raise InputError(f"{where}: {exc}") from exc
    except RecursionError as exc:
        raise InputError(f"{where}: JSON nested more than {MAX_DEPTH} levels deep") from exc
    if _depth(value) > MAX_DEPTH:
        raise InputError(f"{where}: JSON nested more than {MAX_DEPTH} levels deep")
    return value


def check_limits(value: Any, where: str) -> None:
    """InputError naming `where` when a decoded value breaks the module's limits: nested more than
    `MAX_DEPTH` deep, an integer of more than `MAX_INT_DIGITS` digits, a float that is not finite."""
    if _depth(value) > MAX_DEPTH:
        raise InputError(f"{where}: nested more than {MAX_DEPTH} levels deep")
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
        elif isinstance(item, int) and not isinstance(item, bool) and abs(item) >= 10**MAX_INT_DIGITS:
            raise InputError(f"{where}: an integer of more than {MAX_INT_DIGITS} digits")
        elif isinstance(item, float) and not math.isfinite(item):
            raise InputError(f"{where}: the number {item} is out of range (finite numbers only)")


def decode_utf8(data: bytes, where: str) -> str:
    """`data` as text; InputError naming `where` and the first bad byte when it is not UTF-8."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        bad = data[exc.start : exc.start + 1].hex()
        raise InputError(f"{where}: not UTF-8 text (byte 0x{bad} at offset {exc.start})") from exc


def _mib(n: int) -> str:
    return f"{n / 2**20:g} MiB"


def read_text(path: Path, limit: int = MAX_FILE_BYTES) -> str:
    """A UTF-8 text file's content; InputError naming the file when it cannot be read or decoded, or holds
    more than `limit` bytes (only `limit + 1` bytes are ever read: `/dev/zero` is refused at once)."""
    try:
        with path.open("rb") as f:
            data = f.read(limit + 1)
    except OSError as exc:
        raise InputError(f"{path}: cannot read ({exc.strerror or exc})") from exc
    if len(data) > limit:
        raise InputError(f"{path}: larger than {_mib(limit)} (not a file flatshare reads)")
    return decode_utf8(data, str(path))


def read_lines(path: Path) -> Iterator[tuple[str, str]]:
    """(`path:line`, text) for each non-blank line of a UTF-8 JSON-lines file, streamed; InputError naming
    the file (and line) when it cannot be read, a line is longer than `MAX_LINE_BYTES` or the file longer
    than `MAX_LINES_FILE_BYTES`."""
    try:
        f = path.open("rb")
    except OSError as exc:
        raise InputError(f"{path}: cannot read ({exc.strerror or exc})") from exc
    total = 0
    with f:
        for number in itertools.count(1):
            try:
                raw = f.readline(MAX_LINE_BYTES + 1)
            except OSError as exc:
                raise InputError(f"{path}: cannot read ({exc.strerror or exc})") from exc
            if not raw:
                return
            total += len(raw)
            where = f"{path}:{number}"
            if len(raw) > MAX_LINE_BYTES:
                raise InputError(f"{where}: a line longer than {_mib(MAX_LINE_BYTES)}")
            if total > MAX_LINES_FILE_BYTES:
                raise InputError(f"{path}: larger than {_mib(MAX_LINES_FILE_BYTES)}")
            text = decode_utf8(raw, where)
            if text.strip():
                yield where, text


def read_json(path: Path, limit: int = MAX_JSON_FILE_BYTES) -> Any:
    """One JSON document from a file, within the module's limits (InputError naming the file)."""
    return loads(read_text(path, limit), str(path))


def read_object(path: Path) -> dict[str, Any]:
    """`read_json` for a file that must hold an object (InputError naming the file otherwise)."""
    data = read_json(path)
    if not isinstance(data, dict):
        raise InputError(f"{path}: must hold a JSON object, not {type(data).__name__}")
    return data
