"""Statistics used in reports: percentiles, bootstrap confidence intervals, paired tests."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats as scipy_stats


def percentile(values: Sequence[float], q: float) -> float | None:
    """The q-th percentile (linear interpolation, numpy's default), None for no values."""
    return float(np.percentile(np.asarray(values, dtype=float), q)) if len(values) else None


@dataclass(frozen=True)
class Interval:
    estimate: float
    low: float
    high: float


def bootstrap_ci(
    values: Sequence[float], q: float = 95.0, level: float = 0.95, resamples: int = 2000, seed: int = 0
) -> Interval | None:
    """Percentile-bootstrap confidence interval for the q-th percentile of `values` (seeded)."""
    if len(values) < 2:
        return None
    data = np.asarray(values, dtype=float)
    rng = np.random.default_rng(seed)
    draws = rng.choice(data, size=(resamples, len(data)), replace=True)
    estimates = np.percentile(draws, q, axis=1)
    tail = (1 - level) / 2 * 100
    low, high = np.percentile(estimates, [tail, 100 - tail])
    return Interval(float(np.percentile(data, q)), float(low), float(high))


@dataclass(frozen=True)
class PairedTest:
    mean_difference: float
    t: float | None
    p_value: float | None
    n: int


def paired_ttest(a: Sequence[float], b: Sequence[float]) -> PairedTest:
    """Paired t-test of a against b (same seeds in the same order). No test below two pairs or when every
    difference is equal (p is then undefined); the mean difference is reported regardless."""
    if len(a) != len(b):
        raise ValueError("paired samples must have equal length")
    diff = np.asarray(a, dtype=float) - np.asarray(b, dtype=float)
    mean = float(diff.mean()) if len(diff) else float("nan")
    if len(diff) < 2 or np.allclose(diff, diff[0]):
        return PairedTest(mean, None, None, len(diff))
    result = scipy_stats.ttest_rel(a, b)
    return PairedTest(mean, float(result.statistic), float(result.pvalue), len(diff))
