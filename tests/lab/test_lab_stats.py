"""Statistics used in reports."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats as scipy_stats

from flatshare.lab.stats import bootstrap_ci, paired_ttest, percentile


def test_bootstrap_ci_brackets_the_estimate_and_is_seeded() -> None:
    values = list(np.random.default_rng(0).lognormal(0, 0.5, 400))
    ci = bootstrap_ci(values, q=95)
    assert ci is not None
    assert ci.low <= ci.estimate <= ci.high
    assert ci.estimate == pytest.approx(percentile(values, 95))
    assert bootstrap_ci(values, q=95) == ci
    wide = bootstrap_ci(values[:20], q=95)
    assert wide is not None and (wide.high - wide.low) > (ci.high - ci.low)


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
