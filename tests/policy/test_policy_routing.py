"""The routing policies as pure functions: the threshold rule's cases, the simple policies, determinism."""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from flatshare.policy.load import BackendLoad
from flatshare.policy.policies import (
    POLICY_NAMES,
    REASONS,
    first,
    least_kv,
    least_waiting,
    make_policy,
    random_choice,
    round_robin,
    threshold,
)
from flatshare.policy.routing import RequestFeatures, Thresholds

LIMITS = Thresholds(kv_usage=0.7, input_tokens=4000)


def snap(name: str, kv: float, waiting: int = 0, stale: bool = False) -> BackendLoad:
    return BackendLoad(name, kv_usage=kv, waiting=waiting, scrape_age_s=0.05, stale=stale)


def req(tokens: int, sequence: int = 0) -> RequestFeatures:
    return RequestFeatures(f"r{sequence}", tokens, sequence)


def test_long_request_moves_off_a_pressured_preferred_backend() -> None:
    backends = (snap("a", 0.95), snap("b", 0.30), snap("c", 0.10))
    decision = threshold(req(20000), backends, LIMITS, prefer=first)
    assert (decision.backend, decision.reason, decision.preferred) == ("c", "kv_pressure", "a")


@pytest.mark.parametrize(
    ("tokens", "kv_a", "backend", "reason"),
    [
        (4000, 0.95, "a", "below_input_threshold"),  # exactly at the threshold is not over it
        (100, 0.99, "a", "below_input_threshold"),
        (20000, 0.70, "a", "below_kv_threshold"),
        (20000, 0.20, "a", "below_kv_threshold"),
        (4001, 0.71, "b", "kv_pressure"),
    ],
)
def test_both_thresholds_must_be_exceeded(tokens: int, kv_a: float, backend: str, reason: str) -> None:
    decision = threshold(req(tokens), (snap("a", kv_a), snap("b", 0.1)), LIMITS, prefer=first)
    assert (decision.backend, decision.reason) == (backend, reason)


def test_no_better_backend_keeps_the_preferred_one() -> None:
    backends = (snap("a", 0.80), snap("b", 0.90))
    assert threshold(req(9000), backends, LIMITS, prefer=first).reason == "no_better_backend"
    assert threshold(req(9000), backends[:1], LIMITS, prefer=first).backend == "a"


def test_stale_readings_count_as_full() -> None:
    stale_preferred = (snap("a", 0.0, stale=True), snap("b", 0.5))
    assert threshold(req(9000), stale_preferred, LIMITS, prefer=first).backend == "b"
    stale_other = (snap("a", 0.9), snap("b", 0.0, stale=True), snap("c", 0.6))
    assert threshold(req(9000), stale_other, LIMITS, prefer=first).backend == "c"
    never_scraped = BackendLoad("d")
    assert never_scraped.pressure == 1.0


def test_ties_go_to_fewer_waiting_then_configured_order() -> None:
    backends = (
        snap("a", 0.9),
        snap("b", 0.2, waiting=3),
        snap("c", 0.2, waiting=1),
        snap("d", 0.2, waiting=1),
    )
    assert threshold(req(9000), backends, LIMITS, prefer=first).backend == "c"
    assert least_kv(req(1), backends).backend == "c"
    assert least_waiting(req(1), (snap("a", 0.5, 2), snap("b", 0.4, 2), snap("c", 0.1, 5))).backend == "b"


def test_round_robin_follows_the_sequence() -> None:
    backends = (snap("a", 0), snap("b", 0), snap("c", 0))
    assert [round_robin(req(1, i), backends).backend for i in range(5)] == ["a", "b", "c", "a", "b"]
    decision = threshold(req(9000, 1), (snap("a", 0.5), snap("b", 0.9), snap("c", 0.1)), LIMITS)
    assert (decision.preferred, decision.backend) == ("b", "c")


def test_random_is_reproducible_from_its_seed() -> None:
    backends = tuple(snap(n, 0) for n in "abcd")
    rng_a, rng_b = random.Random(7), random.Random(7)
    assert [random_choice(req(1), backends, rng_a) for _ in range(20)] == [
        random_choice(req(1), backends, rng_b) for _ in range(20)
    ]
    seeded_a, seeded_b = make_policy("random", seed=3), make_policy("random", seed=3)
    assert [seeded_a(req(1), backends).backend for _ in range(30)] == [
        seeded_b(req(1), backends).backend for _ in range(30)
    ]
    assert len({seeded_a(req(1), backends).backend for _ in range(200)}) == 4


def test_make_policy_checks_its_arguments() -> None:
    with pytest.raises(ValueError, match="unknown policy"):
        make_policy("fastest")
    with pytest.raises(ValueError, match="needs thresholds"):
        make_policy("threshold")
    with pytest.raises(ValueError, match="prefer must be"):
        make_policy("threshold", LIMITS, prefer="random")
    for name in POLICY_NAMES:
        assert make_policy(name, LIMITS)(req(1), (snap("a", 0),)).backend == "a"


backend_lists = st.lists(
    st.builds(
        BackendLoad,
        name=st.sampled_from("abcdefgh"),
        kv_usage=st.floats(0, 1),
        waiting=st.integers(0, 50),
        scrape_age_s=st.floats(0, 5),
        stale=st.booleans(),
    ),
    min_size=1,
    max_size=6,
    unique_by=lambda s: s.name,
).map(tuple)


@given(backends=backend_lists, tokens=st.integers(1, 100_000), sequence=st.integers(0, 10_000))
def test_every_policy_picks_a_candidate_with_a_known_reason(
    backends: tuple[BackendLoad, ...], tokens: int, sequence: int
) -> None:
    for name in POLICY_NAMES:
        decision = make_policy(name, LIMITS, seed=sequence)(req(tokens, sequence), backends)
        names = {b.name for b in backends}
        assert decision.backend in names and decision.preferred in names
        assert decision.reason in REASONS and decision.reason != "no_backend"
    again = make_policy("threshold", LIMITS)(req(tokens, sequence), backends)
    assert again == make_policy("threshold", LIMITS)(req(tokens, sequence), backends)


@given(backends=backend_lists, tokens=st.integers(1, 100_000))
def test_threshold_only_ever_moves_to_a_less_pressured_backend(
    backends: tuple[BackendLoad, ...], tokens: int
) -> None:
    decision = threshold(req(tokens), backends, LIMITS, prefer=first)
    by_name = {b.name: b for b in backends}
    if decision.backend != decision.preferred:
        assert decision.reason == "kv_pressure"
        assert by_name[decision.backend].pressure < by_name[decision.preferred].pressure
        assert tokens > LIMITS.input_tokens and by_name[decision.preferred].pressure > LIMITS.kv_usage
