"""Reading JSON that a user, an operator or a client hands flatshare, with every limit checked up front.

Python's `json` accepts more than JSON and fails in ways a caller cannot read: `NaN`, `Infinity` and
`1e400` become non-finite floats (a simulation with an infinite arrival time never ends); an integer of
any length is converted (CPython refuses past 4,300 digits with a ValueError from deep inside); nesting
recurses once per level (about 1,000 levels raise RecursionError). `loads` turns each into an
`InputError` that names `where` (a file and line, an option); `read_text` does the same for a file that
cannot be read or is not UTF-8.

Limits: integers of at most `MAX_INT_DIGITS` digits (every 64-bit integer fits), finite floats, at most
`MAX_DEPTH` levels of nesting. Ranges (a count > 0, seconds below a bound) are the caller's to check.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from flatshare.errors import InputError

MAX_INT_DIGITS = 20
MAX_DEPTH = 64


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


def loads(text: str | bytes, where: str) -> Any:
    """Decode one JSON document within the module's limits; InputError naming `where` otherwise."""
    if isinstance(text, bytes):
        text = decode_utf8(text, where)
    try:
        value = json.loads(
            text, parse_int=_parse_int, parse_float=_parse_float, parse_constant=_parse_constant
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


def decode_utf8(data: bytes, where: str) -> str:
    """`data` as text; InputError naming `where` and the first bad byte when it is not UTF-8."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        bad = data[exc.start : exc.start + 1].hex()
        raise InputError(f"{where}: not UTF-8 text (byte 0x{bad} at offset {exc.start})") from exc


def read_text(path: Path) -> str:
    """A UTF-8 text file's content; InputError naming the file when it cannot be read or decoded."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise InputError(f"{path}: cannot read ({exc.strerror or exc})") from exc
    return decode_utf8(data, str(path))
