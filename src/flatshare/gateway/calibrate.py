"""Calibrating the threshold rule from the first part of a recorded run (`flatshare calibrate-thresholds`).

Rule. Let the run span `[t0, t_end]` (its first and last sample times) and `cutoff = t0 + fraction *
(t_end - t0)` (fraction 0.2: the first 20% by time). From the samples at or before `cutoff` only:
- `input_tokens` threshold = the `input_percentile` (default 90th) of the requests' input tokens:
  "long" means longer than nine requests in ten seen so far;
- `kv_usage` threshold = the `kv_percentile` (default 80th) of the KV-use readings, kept within
  [`KV_FLOOR`, `KV_CEILING`] so an idle prefix does not make every long request move, nor a saturated
  one make none move.
Percentiles are nearest-rank (the smallest value with at least p% of the values at or below it), so
thresholds are values that occurred. Nothing after the cutoff is read except the last time stamp, which
fixes the span: changing the values of the last 80% leaves the thresholds unchanged. At least
`MIN_SAMPLES` of each kind must lie in the prefix.

Inputs (`load_samples`, JSONL files or run folders, one kind per line, mixed freely): gateway audit lines
(`t`, `input_tokens`, `backends[].kv_usage` of backends not stale; retries skipped), request records
(`prompt_tokens` at `send_s`; any line with `prompt_tokens` is one, read by the one record reader,
`flatshare.runfiles.records`, so an old record is refused with the converter's name), engine samples (`t`,
`kv_usage`: `samples.jsonl`). Token counts are integers in [0, 10^7], KV use lies in [0, 1], times are
finite; files are read within `flatshare.jsonin`'s bounds (a line of at most 16 MiB). A folder (a `flatshare sim` or `flatshare replay` run) reads its
`requests.jsonl` with `read_records` and its `samples.jsonl`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flatshare.errors import InputError
from flatshare.gateway.config import ThresholdConfig
from flatshare.runfiles.records import MAX_TOKENS, ReplayRecord, decode_lines, read_records

KV_FLOOR = 0.05
KV_CEILING = 0.99
MIN_SAMPLES = 5


@dataclass(frozen=True)
class CalibrationSample:
    """One observation at time `t`: a request's input tokens, a KV-use reading, or both."""

    t: float
    input_tokens: int | None = None
    kv_usage: float | None = None


@dataclass(frozen=True)
class Calibration:
    """The thresholds and what they rest on."""

    thresholds: ThresholdConfig
    cutoff_t: float
    token_samples: int
    kv_samples: int


def nearest_rank(values: list[float], percentile: float) -> float:
    """The nearest-rank percentile of a non-empty list."""
    ordered = sorted(values)
    rank = max(1, math.ceil(percentile / 100 * len(ordered)))
    return ordered[rank - 1]


def calibrate_thresholds(
    samples: Iterable[CalibrationSample],
    fraction: float = 0.2,
    input_percentile: float = 90.0,
    kv_percentile: float = 80.0,
    source: str = "",
) -> Calibration:
    """Thresholds from the first `fraction` of the run by time (module docstring); `source` is recorded."""
    if not 0 < fraction <= 1:
        raise InputError(f"fraction must lie in (0, 1], got {fraction}")
    for name, p in (("input_percentile", input_percentile), ("kv_percentile", kv_percentile)):
        if not 0 < p <= 100:
            raise InputError(f"{name} must lie in (0, 100], got {p}")
    rows = list(samples)
    if not rows:
        raise InputError("no samples to calibrate from")
    t0, t_end = min(s.t for s in rows), max(s.t for s in rows)
    cutoff = t0 + fraction * (t_end - t0)
    prefix = [s for s in rows if s.t <= cutoff]
    tokens = [float(s.input_tokens) for s in prefix if s.input_tokens is not None]
    kv = [s.kv_usage for s in prefix if s.kv_usage is not None]
    if len(tokens) < MIN_SAMPLES or len(kv) < MIN_SAMPLES:
        raise InputError(
            f"the first {fraction:.0%} of the run (to t={cutoff:.3f}) holds {len(tokens)} requests and "
            f"{len(kv)} KV readings; calibration needs at least {MIN_SAMPLES} of each"
        )
    kv_threshold = min(KV_CEILING, max(KV_FLOOR, nearest_rank(kv, kv_percentile)))
    thresholds = ThresholdConfig(
        kv_usage=round(kv_threshold, 4),
        input_tokens=int(nearest_rank(tokens, input_percentile)),
        calibrated_from=source,
    )
    return Calibration(thresholds, cutoff, len(tokens), len(kv))


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
