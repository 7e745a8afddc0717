"""`KeepProtectedLRU`: vLLM's CPU-tier LRU policy that evicts a protected request's blocks last, and a
preempted request's blocks after ordinary ones until it comes back.

vLLM 0.32's CPU offloading manager takes its cache policy by name from the connector's extra config
(`eviction_policy`, and `cache_policy_module_path` for one outside vLLM: `CachePolicyFactory`). This one is
vLLM's `LRUCachePolicy` plus a set of kept keys: the keys a protected request (one that
`FlatshareOffloadingConnector` marked with `ProtectedRequest` in its `ReqContext`) stored, touched or
reused. An eviction takes ordinary keys first, least recently used first, then kept ones, least recently
used first; beyond `max_kept_share` of the tier, the least recently used kept keys count as ordinary.
`flatshare.sim.cpu_tier` is the simulator's copy of the same rule.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from vllm.v1.kv_offload.base import OffloadKey, ReqContext
from vllm.v1.kv_offload.cpu.policies.base import ChunkStatus
from vllm.v1.kv_offload.cpu.policies.lru import LRUCachePolicy

POLICY_NAME = "KeepProtectedLRU"
POLICY_MODULE = "flatshare.connector.keep_policy"


@dataclass(frozen=True)
class ProtectedRequest:
    """The `ReqContext` state that marks a protected request's accesses."""


class KeepProtectedLRU(LRUCachePolicy):
    """LRU with a protected request's keys evicted last (see the module docstring)."""

    def __init__(self, cache_capacity: int) -> None:
        super().__init__(cache_capacity)
        self.max_kept_share = 0.5
        """Set by the connector from `flatshare_protected.max_kept_share`."""
        self._kept: set[OffloadKey] = set()
        self._held: dict[str, set[OffloadKey]] = {}  # preempted request -> its keys, until it is back

    @property
    def kept_keys(self) -> int:
        return len(self._kept.intersection(self.chunks))

    @property
    def held_keys(self) -> int:
        """Keys held for preempted requests and still in the tier."""
        return len(self._held_keys().intersection(self.chunks))

    def _held_keys(self) -> set[OffloadKey]:
        return set().union(*self._held.values())

    def hold(self, owner: str, keys: Iterable[OffloadKey]) -> int:
        """Spare `keys` (in prefix order) in the tier for `owner`, a preempted request, until
        `release(owner)` (a second hold replaces the first). They become the most recent keys, the first
        the most recent of all (vLLM's `touch` order), so that past the cap a hit loses its tail rather
        than its head. Returns how many of them the tier holds."""
        ordered = [key for key in dict.fromkeys(keys) if key in self.chunks]
        self._update_recency(reversed(ordered))  # as vLLM's touch: past the cap the tail goes first
        self._held.pop(owner, None)
        if ordered:
            self._held[owner] = set(ordered)
        return len(ordered)

    def release(self, owner: str) -> None:
        """`owner` is back (or ended): its keys are ordinary again, unless kept or held by another."""
        self._held.pop(owner, None)

    def _keep(self, keys: Iterable[OffloadKey], req_context: ReqContext) -> None:
        if req_context.get_state(ProtectedRequest) is not None:
            self._kept.update(keys)  # a store miss is kept before its insert; evict() prunes dropped ones

    def touch(self, keys: Iterable[OffloadKey], req_context: ReqContext) -> None:
        keys = list(keys)
        super().touch(keys, req_context)
        self._keep(keys, req_context)

    def on_request_finished(
        self,
        key_groups: Sequence[Sequence[OffloadKey]],
        insertion_only_keys: set[OffloadKey],
        reused_keys: set[OffloadKey],
        req_context: ReqContext,
    ) -> None:
        super().on_request_finished(key_groups, insertion_only_keys, reused_keys, req_context)
        self._keep((key for group in key_groups for key in group), req_context)

    def _forget(self, keys: set[OffloadKey]) -> None:
        """Keys that left the tier are neither kept nor held (a key stored again starts ordinary)."""
        self._kept.difference_update(keys)
        for held in self._held.values():
            held.difference_update(keys)

    def remove(self, key: OffloadKey) -> None:
        super().remove(key)
        self._forget({key})

    def clear(self) -> None:
        super().clear()
        self._kept.clear()
        self._held.clear()

    def _kept_within_cap(self) -> set[OffloadKey]:
        self._kept.intersection_update(self.chunks)
        spared = self._kept | self._held_keys().intersection(self.chunks)
        cap = int(self.cache_capacity * self.max_kept_share)
        if len(spared) <= cap:
            return spared
        recent = sorted(spared, key=self._ranks.__getitem__, reverse=True)
        return set(recent[:cap])

    def evict(self, n: int, protected: set[OffloadKey]) -> list[tuple[OffloadKey, ChunkStatus]] | None:
        """Exactly `n` evictable keys outside `protected`, ordinary ones first; None (nothing changed) when
        there are too few."""
        kept = self._kept_within_cap()
        ordinary = len(self._evictable - protected - kept)
        if ordinary >= n:
            victims = super().evict(n, protected | kept)
        elif len(self._evictable - protected) < n:
            return None
        else:
            first = super().evict(ordinary, protected | kept) or []
            rest = super().evict(n - ordinary, protected)
            assert rest is not None, "enough evictable keys were counted"
            victims = first + rest
        if victims is not None:
            self._forget({key for key, _ in victims})
        return victims
