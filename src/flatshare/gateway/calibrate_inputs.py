"""The inputs of `flatshare calibrate-thresholds`: calibration samples (`flatshare.policy.calibrate`) read
from JSONL files and run folders, one kind per line, mixed freely: gateway audit lines (`t`,
`input_tokens`, `backends[].kv_usage` of backends not stale; retries skipped), request records
(`prompt_tokens` at `send_s`; any line with `prompt_tokens` is one, read by the one record reader,
`flatshare.runfiles.records`, so an old record is refused with the converter's name), engine samples (`t`,
`kv_usage`: `samples.jsonl`). Token counts are integers in [0, 10^7], KV use lies in [0, 1], times are
finite; files are read within `flatshare.jsonin`'s bounds (a line of at most 16 MiB). A folder (a
`flatshare sim` or `flatshare replay` run) reads its `requests.jsonl` with `read_records` and its
`samples.jsonl`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from flatshare.errors import InputError
from flatshare.policy.calibrate import CalibrationSample
from flatshare.runfiles.records import MAX_TOKENS, ReplayRecord, decode_lines, read_records


def load_samples(paths: Iterable[Path]) -> list[CalibrationSample]:
    """Samples from JSONL files and simulator output folders (module docstring)."""
    samples: list[CalibrationSample] = []
    for path in paths:
        if path.is_dir():
            samples.extend(_record_sample(r) for r in read_records(path / "requests.jsonl"))
            samples.extend(_read_file(path / "samples.jsonl"))
        else:
            samples.extend(_read_file(path))
    return samples


def _record_sample(record: ReplayRecord) -> CalibrationSample:
    return CalibrationSample(float(record.send_s), input_tokens=record.prompt_tokens)


def _read_file(path: Path) -> Iterator[CalibrationSample]:
    for where, row in decode_lines(path):
        try:
            yield from samples_from_row(row, where)
        except InputError:
            raise
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise InputError(f"{where}: not an audit line, request record or engine sample ({exc})") from exc


def _number(value: Any, key: str, where: str) -> float:
    """A finite JSON number (`float("nan")` of the string "nan" would pass as one)."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise InputError(f"{where}: {key} must be a finite number, got {value!r}")
    return float(value)


def _tokens(value: Any, where: str) -> int:
    """A token count: an integer in [0, MAX_TOKENS] (the record format's bound)."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_TOKENS:
        raise InputError(f"{where}: input_tokens must be an integer in [0, {MAX_TOKENS:,}], got {value!r}")
    return value


def _kv_usage(value: Any, where: str) -> float:
    usage = _number(value, "kv_usage", where)
    if not 0 <= usage <= 1:
        raise InputError(f"{where}: kv_usage must lie in [0, 1], got {value!r}")
    return usage


def samples_from_row(row: dict[str, Any], where: str = "line") -> Iterator[CalibrationSample]:
    """The samples in one JSON line of any of the three kinds (an audit line of a routing change has none).
    A request record is validated by `ReplayRecord.from_json` (InputError prefixed with `where`)."""
    if row.get("kind") in ("routing", "membership"):  # gateway audit: a routing or membership change
        return
    if "backends" in row and "input_tokens" in row:  # gateway audit
        if row.get("attempt", 1) != 1:
            return
        t = _number(row["t"], "t", where)
        yield CalibrationSample(t, input_tokens=_tokens(row["input_tokens"], where))
        for backend in row["backends"]:
            if backend.get("kv_usage") is not None and not backend.get("stale", False):
                yield CalibrationSample(t, kv_usage=_kv_usage(backend["kv_usage"], where))
    elif "prompt_tokens" in row:  # request record (docs/records.md)
        yield _record_sample(ReplayRecord.from_json(row, where))
    elif "t" in row and "kv_usage" in row:  # engine sample
        yield CalibrationSample(_number(row["t"], "t", where), kv_usage=_kv_usage(row["kv_usage"], where))
    else:
        raise ValueError(f"unrecognised keys {sorted(row)[:6]}")
