"""Intervals and tests for comparing a condition with its baseline (on top of `lab.stats`).

- Over replicates (synthetic seeds, trace windows): the mean of per-replicate p95s with a t-interval,
  and a paired t-test (`lab.stats.paired_ttest`) on the per-replicate p95s.
- Over requests, when a trace has a single window: the pooled p95 with a percentile-bootstrap interval
  (`lab.stats.bootstrap_ci`), and a paired bootstrap test of the p95 difference that resamples
  requests (each request's TTFT under both conditions stays together). Requests in one run are not
  independent (they queue behind each other), so this test is optimistic; the report says so.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats as scipy_stats

from flatshare.lab.stats import paired_ttest

RESAMPLES = 2000


@dataclass(frozen=True)
class Comparison:
    p_value: float | None
    method: str
    mean_difference_s: float | None
    t: float | None
    n: int


def mean_ci(values: Sequence[float], level: float = 0.95) -> tuple[float, float] | None:
    """Student-t interval of the mean; None below two values."""
    if len(values) < 2:
        return None
    data = np.asarray(values, dtype=float)
    half = (
        float(scipy_stats.t.ppf(0.5 + level / 2, len(data) - 1))
        * float(data.std(ddof=1))
        / math.sqrt(len(data))
    )
    mean = float(data.mean())
    return mean - half, mean + half


def paired_over_replicates(a: Sequence[float], b: Sequence[float]) -> Comparison:
    test = paired_ttest(a, b)
    return Comparison(test.p_value, "paired t-test over replicates", test.mean_difference, test.t, test.n)


def paired_bootstrap_p95(a: dict[str, float], b: dict[str, float], seed: int = 0) -> Comparison:
    """Two-sided paired bootstrap test of p95(a) - p95(b) over the requests present in both."""
    ids = sorted(set(a) & set(b))
    if len(ids) < 2:
        return Comparison(None, "paired bootstrap over requests", None, None, len(ids))
    x = np.array([a[i] for i in ids])
    y = np.array([b[i] for i in ids])
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(ids), size=(RESAMPLES, len(ids)))
    diff = np.percentile(x[idx], 95, axis=1) - np.percentile(y[idx], 95, axis=1)
    p = 2 * min(float((diff <= 0).mean()), float((diff >= 0).mean()))
    observed = float(np.percentile(x, 95) - np.percentile(y, 95))
    return Comparison(
        min(1.0, max(p, 1 / RESAMPLES)), "paired bootstrap over requests", observed, None, len(ids)
    )
