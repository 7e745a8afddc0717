"""`KeepProtectedLRU`: vLLM's LRU order, with a protected request's keys evicted last and at most a share
of the tier kept."""

from __future__ import annotations

import pytest
from vllm.v1.kv_offload.base import ReqContext
from vllm.v1.kv_offload.cpu.policies.base import ChunkStatus

from flatshare.connector.keep_policy import KeepProtectedLRU, ProtectedRequest

pytestmark = pytest.mark.vllm


def _policy(keys: list[str], kept: list[str], share: float = 0.5) -> KeepProtectedLRU:
    """A policy holding `keys` (inserted in order: the first is the least recently used), all evictable,
    with `kept` reused by a protected request (which does not change their recency order here)."""
    policy = KeepProtectedLRU(cache_capacity=len(keys))
    policy.max_kept_share = share
    for i, key in enumerate(keys):
        chunk = ChunkStatus(i)
        chunk.ref_cnt = 0
        policy.insert(key, chunk)  # type: ignore[arg-type]
    protected = ReqContext("voice")
    protected.set_state(ProtectedRequest())
    policy._keep(kept, protected)  # type: ignore[arg-type]
    policy.touch([], ReqContext("agent"))  # an unprotected touch keeps nothing
    return policy


def _evicted(policy: KeepProtectedLRU, n: int, protected: frozenset[str] = frozenset()) -> list[str] | None:
    victims = policy.evict(n, set(protected))  # type: ignore[arg-type]
    return None if victims is None else [str(key) for key, _ in victims]


def test_ordinary_keys_go_first_then_kept_ones_least_recent_first() -> None:
    policy = _policy(["k1", "k2", "o1", "o2"], kept=["k1", "k2"])
    assert _evicted(policy, 1) == ["o1"]
    assert _evicted(policy, 2) == ["o2", "k1"]
    assert policy.kept_keys == 1


def test_an_eviction_that_cannot_be_met_changes_nothing() -> None:
    policy = _policy(["k1", "o1"], kept=["k1"], share=1.0)
    assert _evicted(policy, 2, protected=frozenset({"o1"})) is None
    assert _evicted(policy, 2) == ["o1", "k1"]


def test_kept_keys_past_the_share_count_as_ordinary() -> None:
    policy = _policy(["k1", "k2", "k3", "o1"], kept=["k1", "k2", "k3"], share=0.5)  # 2 of 4 kept at most
    assert _evicted(policy, 1) == ["k1"]  # the least recently used kept key is past the cap
    assert _evicted(policy, 1) == ["o1"]


def test_a_plain_lru_without_protected_requests() -> None:
    policy = _policy(["a", "b", "c"], kept=[])
    assert _evicted(policy, 2) == ["a", "b"]


def test_a_preempted_requests_keys_are_held_until_it_is_back() -> None:
    policy = _policy(["v1", "v2", "o1", "o2"], kept=[])
    assert policy.hold("victim", ["v1", "v2", "gone"]) == 2 and policy.held_keys == 2  # type: ignore[list-item]
    assert _evicted(policy, 2) == ["o1", "o2"]
    policy.release("victim")
    assert policy.held_keys == 0
    # Held, v1 became the most recent of the two (vLLM's touch order): the victim's tail goes first.
    assert _evicted(policy, 1) == ["v2"]


def test_held_keys_past_the_share_lose_the_victims_tail_first() -> None:
    policy = _policy(["v1", "v2", "v3", "o1"], kept=[], share=0.5)  # 2 of 4 spared at most
    policy.hold("victim", ["v1", "v2", "v3"])  # type: ignore[list-item]
    assert _evicted(policy, 2) == ["o1", "v3"]
    assert policy.held_keys == 2
