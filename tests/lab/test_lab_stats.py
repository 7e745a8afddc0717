"""Statistics used in reports."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats as scipy_stats

from flatshare.lab.stats import bootstrap_ci, cluster_bootstrap_ci, paired_ttest, percentile


def test_bootstrap_ci_brackets_the_estimate_and_is_seeded() -> None:
    values = list(np.random.default_rng(0).lognormal(0, 0.5, 400))
    ci = bootstrap_ci(values, q=95)
    assert ci is not None
    assert ci.low <= ci.estimate <= ci.high
    assert ci.estimate == pytest.approx(percentile(values, 95))
    assert bootstrap_ci(values, q=95) == ci
    wide = bootstrap_ci(values[:20], q=95)
    assert wide is not None and (wide.high - wide.low) > (ci.high - ci.low)


def test_cluster_bootstrap_is_wider_than_a_turn_bootstrap_when_groups_differ() -> None:
    # 20 calls of 30 turns: each call's turns sit around its own level (a slow call stays slow), so the
    # pooled mean is known only as well as 20 call levels, not 600 independent turns.
    rng = np.random.default_rng(1)
    groups = [list(level + rng.normal(0, 0.05, 30)) for level in rng.normal(2.0, 1.0, 20)]
    pooled = [v for g in groups for v in g]
    clustered = cluster_bootstrap_ci(groups)
    assert clustered is not None
    assert clustered.estimate == pytest.approx(np.mean(pooled))
    assert clustered.low <= clustered.estimate <= clustered.high
    assert cluster_bootstrap_ci(groups) == clustered  # seeded
    draws = np.random.default_rng(0).choice(pooled, size=(1000, len(pooled)))
    naive_low, naive_high = np.percentile(draws.mean(axis=1), [2.5, 97.5])
    assert (clustered.high - clustered.low) > 3 * (naive_high - naive_low)


def test_cluster_bootstrap_needs_two_groups_with_values() -> None:
    assert cluster_bootstrap_ci([[1.0, 2.0], []]) is None
    ci = cluster_bootstrap_ci([[1.0], [], [3.0]])
    assert ci is not None and ci.estimate == 2.0 and 1.0 <= ci.low <= ci.high <= 3.0


def test_paired_ttest_matches_scipy_and_refuses_degenerate_input() -> None:
    a, b = [5.1, 4.8, 6.0, 5.5, 5.2], [2.2, 2.0, 2.9, 2.4, 2.6]
    test = paired_ttest(a, b)
    expected = scipy_stats.ttest_rel(a, b)
    assert test.p_value == pytest.approx(expected.pvalue)
    assert test.mean_difference == pytest.approx(np.mean(a) - np.mean(b))
    assert paired_ttest([1.0], [2.0]).p_value is None
    assert paired_ttest([2.0, 3.0], [1.0, 2.0]).p_value is None  # every difference equal
    with pytest.raises(ValueError):
        paired_ttest([1.0, 2.0], [1.0])


@pytest.mark.parametrize("q", [None, 0.0, 50.0, 95.0, 100.0])
def test_cluster_bootstrap_equals_pooling_each_resample(q: float | None) -> None:
    """The vectorized resamples give what pooling each resample's groups and taking the figure gives."""
    rng = np.random.default_rng(2)
    groups = [list(rng.exponential(2.0, size)) for size in (1, 3, 7, 2, 12, 5)]
    groups[2][1] = groups[4][0]  # a tie across groups
    ci = cluster_bootstrap_ci(groups, q, resamples=300, seed=5)
    draws = np.random.default_rng(5).integers(0, len(groups), size=(300, len(groups)))
    pooled = [np.concatenate([groups[i] for i in row]) for row in draws]
    naive = [float(np.mean(v)) if q is None else float(np.percentile(v, q)) for v in pooled]
    low, high = np.percentile(naive, [2.5, 97.5])
    assert ci is not None
    assert (ci.low, ci.high) == (pytest.approx(low), pytest.approx(high))
