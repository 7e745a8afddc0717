"""sage's pure parts: the length predictor, the cost model, the Gittins rank and the aging bound."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from flatshare.scheduler.sage_config import SageConfig, SageConfigError
from flatshare.scheduler.sage_policy import (
    CostWeights,
    Progress,
    aged_key,
    gittins_index,
    outlived,
    prefill_victim,
    rank,
    remaining_cost,
    starvation_bound_s,
)
from flatshare.scheduler.sage_predict import Features, LengthDistribution, LengthPredictor, prompt_features

WEIGHTS = CostWeights(1.0, 1.0, 0.005)
lengths = st.integers(1, 4096)
progresses = st.builds(Progress, st.integers(1, 50_000), st.just(0), st.integers(0, 50_000))


def point(length: int) -> LengthDistribution:
    return LengthDistribution((length,), (1.0,))


# -- the Gittins rank --------------------------------------------------------------------------------
@given(progresses, lengths)
def test_a_known_length_ranks_at_its_remaining_cost(progress: Progress, length: int) -> None:
    assert rank(point(length), progress, WEIGHTS) == pytest.approx(remaining_cost(WEIGHTS, progress, length))


@given(st.lists(st.tuples(progresses, lengths), min_size=2, max_size=8))
def test_with_every_size_known_the_order_is_srpt(jobs: list[tuple[Progress, int]]) -> None:
    by_rank = sorted(jobs, key=lambda j: rank(point(j[1]), j[0], WEIGHTS))
    costs = [remaining_cost(WEIGHTS, p, n) for p, n in by_rank]
    assert costs == pytest.approx(sorted(costs))


@given(st.lists(st.tuples(st.floats(0.1, 1e6), st.floats(0.01, 10.0)), min_size=1, max_size=12))
def test_the_rank_lies_between_the_least_cost_and_the_mean(samples: list[tuple[float, float]]) -> None:
    samples.sort()
    costs, weights = [c for c, _ in samples], [w for _, w in samples]
    mean = sum(c * w for c, w in samples) / sum(weights)
    value = 1.0 / gittins_index(costs, weights)
    assert costs[0] * (1 - 1e-9) <= value <= mean * (1 + 1e-9)


def test_a_likely_short_request_ranks_far_below_its_mean() -> None:
    # 90% one token, 10% a thousand: the mean cost is ~100 tokens, but serving it a little first pays.
    dist = LengthDistribution((1, 1000), (0.9, 0.1))
    progress = Progress(prompt=1, decoded=0, prefill_left=0)
    weights = CostWeights(1.0, 1.0, 0.0)
    assert rank(dist, progress, weights) < 2.0
    assert rank(point(100), progress, weights) == pytest.approx(100.0)


def test_attained_service_conditions_on_a_longer_output() -> None:
    dist = LengthDistribution((1, 1000), (0.9, 0.1))
    weights = CostWeights(1.0, 1.0, 0.0)
    fresh = rank(dist, Progress(1, 0, 0), weights)
    past_the_short_mode = rank(dist, Progress(1, 5, 0), weights)
    assert past_the_short_mode == pytest.approx(995.0)  # only the long outcome is left
    assert past_the_short_mode > 100 * fresh
    assert outlived(dist, 5, None).values == (1000,)
    assert outlived(dist, 2000, 3000).values == (3000,)  # outlived everything: as long again, capped


@given(progresses, lengths, lengths)
def test_remaining_cost_grows_with_the_length(progress: Progress, a: int, b: int) -> None:
    lo, hi = sorted((a, b))
    assert remaining_cost(WEIGHTS, progress, lo) <= remaining_cost(WEIGHTS, progress, hi)


def test_memory_is_charged_for_kv_held_over_the_decode() -> None:
    progress = Progress(prompt=1000, decoded=0, prefill_left=1000)
    compute_only = remaining_cost(CostWeights(1.0, 1.0, 0.0), progress, 10)
    assert compute_only == 1010
    # 10 steps holding 1000..1009 tokens: 10045 token-steps
    assert remaining_cost(CostWeights(1.0, 1.0, 0.01), progress, 10) == pytest.approx(1010 + 100.45)


# -- aging ---------------------------------------------------------------------------------------------
@given(
    st.floats(1.0, 1e6),
    st.floats(0.0, 100.0),
    st.lists(st.tuples(st.floats(1.0, 1e6), st.floats(0.0, 1000.0)), max_size=30),
    st.floats(1.0, 1e5),
)
def test_aging_bounds_who_can_pass_a_waiting_request(
    r0: float, t0: float, others: list[tuple[float, float]], aging: float
) -> None:
    mine = aged_key(r0, t0, aging)
    bound = starvation_bound_s(r0, aging)
    for r, t in others:
        if aged_key(r, t, aging) < mine:
            assert t < t0 + bound + 1e-6  # only requests arriving within the bound go ahead


def test_without_aging_there_is_no_bound() -> None:
    assert starvation_bound_s(10.0, 0.0) == float("inf")


def test_the_worst_keyed_prefill_is_preempted_only_for_a_better_key() -> None:
    prefilling = [("a", (0, 50.0)), ("b", (0, 500.0))]
    assert prefill_victim(prefilling, (0, 10.0)) == "b"
    assert prefill_victim(prefilling, (0, 600.0)) is None
    assert prefill_victim([], (0, 1.0)) is None
    assert prefill_victim([("hi", (1, 5.0))], (0, 900.0)) == "hi"  # priority first under the priority policy


# -- the predictor -------------------------------------------------------------------------------------
def test_with_no_history_it_predicts_the_prior() -> None:
    dist = LengthPredictor(prior_weight=4, prior_max_tokens=2048).predict(Features(8, 0))
    assert len(dist.values) == 4 and dist.values[0] < 8 and dist.values[-1] > 500


def test_it_learns_a_bucket_and_falls_back_to_coarser_history() -> None:
    predictor = LengthPredictor(history_per_bucket=16, min_history=4, prior_weight=1)
    short, long_ = Features(9, 1), Features(9, 2)
    for _ in range(16):
        predictor.observe(short, 20)
        predictor.observe(long_, 900)
    assert predictor.predict(short).quantile(0.5) == 20
    assert predictor.predict(long_).quantile(0.5) == 900
    # an unseen signature in a seen length bucket: the length bucket's mix
    assert set(predictor.history(Features(9, 3))) == {20, 900}


@given(st.lists(st.tuples(st.integers(0, 40), st.integers(0, 63), st.integers(1, 5000)), max_size=300))
def test_memory_is_bounded(observations: list[tuple[int, int, int]]) -> None:
    predictor = LengthPredictor(history_per_bucket=8, max_buckets=16, min_history=2)
    for bucket, signature, length in observations:
        predictor.observe(Features(bucket, signature), length)
        assert predictor.buckets <= 16
        assert len(predictor.history(Features(bucket, signature))) <= 4 * 8


def test_a_cap_clips_the_distribution() -> None:
    predictor = LengthPredictor(min_history=1, prior_weight=0)
    for n in (10, 100, 1000):
        predictor.observe(Features(5, 0), n)
    assert predictor.predict(Features(5, 0), cap=50).values == (10, 50)


def test_features_are_a_length_bucket_and_a_hash_of_the_first_tokens() -> None:
    a = prompt_features([1, 2, 3, 4], 300, 2, 64)
    assert a == prompt_features([1, 2, 9, 9], 260, 2, 64)  # same head, same power of two
    assert a.length_bucket != prompt_features([1, 2], 600, 2, 64).length_bucket
    assert prompt_features(None, 10, 2, 64).signature == 0


@given(st.lists(st.integers(1, 5000), min_size=1, max_size=200), st.integers(1, 16))
def test_a_summary_keeps_at_most_its_points_and_the_median_roughly(samples: list[int], points: int) -> None:
    dist = LengthDistribution.of((s, 1.0) for s in samples)
    summary = dist.summarized(points)
    assert len(summary.values) <= points or summary == dist
    assert min(dist.values) <= summary.quantile(0.5) <= max(dist.values)


# -- settings ------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "section",
    [
        {"aging_per_s": -1},
        {"memory_weight": float("nan")},
        {"min_history": 100, "history_per_bucket": 10},
        {"prefill_weight": 0, "decode_weight": 0},
        {"enabled": "yes"},
        {"no_such_key": 1},
    ],
)
def test_bad_settings_are_refused(section: dict[str, object]) -> None:
    with pytest.raises(SageConfigError):
        SageConfig.from_additional_config({"sage": section})


def test_absent_means_disabled() -> None:
    assert not SageConfig.from_additional_config(None).enabled
