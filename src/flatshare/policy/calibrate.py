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

Pure: the samples come in as values (`flatshare.gateway.calibrate_inputs` reads them from files).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from flatshare.errors import InputError
from flatshare.policy.routing import ThresholdConfig

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
