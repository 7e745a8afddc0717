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


def cluster_bootstrap_ci(
    groups: Sequence[Sequence[float]],
    q: float | None = None,
    level: float = 0.95,
    resamples: int = 1000,
    seed: int = 0,
) -> Interval | None:
    """Percentile-bootstrap confidence interval for the mean (`q` None) or the q-th percentile (numpy's
    linear interpolation) of the pooled values, resampling whole groups with replacement (a cluster
    bootstrap): the turns of one voice call share its dialogue and the engine's state, so they are not
    independent, and resampling turns one by one would understate the spread. A share of values over a
    bound is the mean of 0/1 values. Empty groups are dropped; None when fewer than 2 groups are left.

    Vectorized: a resample is a count per group, so its mean is a ratio of weighted sums and its
    percentile is read off the cumulative counts of the sorted values (no array is pooled per resample)."""
    arrays = [np.asarray(g, dtype=float) for g in groups]
    arrays = [a for a in arrays if len(a)]
    if len(arrays) < 2:
        return None
    n_groups = len(arrays)
    rng = np.random.default_rng(seed)
    draws = rng.integers(0, n_groups, size=(resamples, n_groups))
    counts = np.zeros((resamples, n_groups))
    np.add.at(counts, (np.arange(resamples)[:, None], draws), 1.0)
    values = np.concatenate(arrays)
    if q is None:
        estimate = float(values.mean())
        sums = np.array([a.sum() for a in arrays])
        sizes = np.array([len(a) for a in arrays], dtype=float)
        estimates = (counts @ sums) / (counts @ sizes)
    else:
        estimate = float(np.percentile(values, q))
        group = np.repeat(np.arange(n_groups), [len(a) for a in arrays])
        order = np.argsort(values, kind="stable")
        ordered = values[order]
        cumulative = np.cumsum(counts[:, group[order]], axis=1)  # copies of sorted values up to each one
        rank = q / 100 * (cumulative[:, -1] - 1)  # the percentile's place in the pooled resample
        below = np.floor(rank)
        last = len(ordered) - 1
        lo = np.minimum((cumulative <= below[:, None]).sum(axis=1), last)
        hi = np.minimum((cumulative <= below[:, None] + 1).sum(axis=1), last)
        estimates = ordered[lo] + (rank - below) * (ordered[hi] - ordered[lo])
    tail = (1 - level) / 2 * 100
    low, high = np.percentile(estimates, [tail, 100 - tail])
    return Interval(estimate, float(low), float(high))


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
