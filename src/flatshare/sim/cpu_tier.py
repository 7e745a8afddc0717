"""The simulated CPU KV tier: vLLM 0.32's CPU offloading manager with its default LRU policy.

vLLM's `OffloadingConnector` (`--kv-offloading-size`) keeps copies of KV blocks in host memory,
managed by `CPUOffloadingManager` (vllm/v1/kv_offload/cpu/manager.py) under the eviction policy named
by the connector's `eviction_policy` extra config, "lru" unless set (`CPUOffloadingSpec.__init__` in
vllm/v1/kv_offload/cpu/spec.py; `LRUCachePolicy` in vllm/v1/kv_offload/cpu/policies/lru.py). This
class keeps the same states for each block hash (one offloaded chunk is one GPU block, vLLM's default
`blocks_per_chunk`):

- `prepare_store` (the manager's `prepare_store`, when the scheduler plans a store): a block not yet
  held enters the tier *write-pending*: not evictable, and a lookup finds it pending
  (`LookupResult.HIT_PENDING`), not a hit. To make room it evicts the least recently used evictable
  blocks, never one of the blocks offered; when too few are evictable the whole store is dropped
  (the manager returns None; the connector logs "cannot store chunks").
- `complete_store` (when the worker reports the store done): the block becomes a hit and evictable.
- `prepare_load` / `complete_load`: a load pins its blocks (a reference count) until it is done.
- Recency (`LRUCachePolicy`): a block is the most recent when inserted, and when a request that used it
  finishes (`touch`: the manager's `on_request_finished` ranks the request's blocks so its first block
  is the most recent of them). Lookups leave recency alone.

With `max_kept_blocks` > 0 (the connector's `keep_in_tier` or `keep_preempted`, `flatshare.connector.config`),
blocks marked `keep` (a protected request's) or `hold` (a preempted request's, until `release` when it
comes back or ends) are evicted only when too few other blocks can be, each kind least recently used first;
kept or held blocks beyond `max_kept_blocks` (the least recently used) count as ordinary. vLLM's side is
`flatshare.connector.keep_policy`, a cache policy of its CPU manager.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass, field


@dataclass
class TierCounters:
    stored_blocks: int = 0
    """Blocks whose store completed (now hits)."""
    evicted_blocks: int = 0
    hit_blocks: int = 0
    """Blocks loaded back to the GPU."""
    dropped_blocks: int = 0
    """Blocks offered for a store the tier could not make room for."""
    kept_evicted_blocks: int = 0
    """Kept or held blocks evicted: nothing else could be, or over `max_kept_blocks`."""
    kept_spared_blocks: int = 0
    """Evictable kept blocks an eviction passed over, taking ordinary ones in their place."""


@dataclass
class _Block:
    ready: bool = False
    pins: int = 0
    kept: bool = False
    holders: set[str] = field(default_factory=set)  # preempted requests that hold it for their return

    @property
    def evictable(self) -> bool:
        return self.ready and self.pins == 0

    @property
    def spared(self) -> bool:
        """Evicted after ordinary blocks: a protected request's, or held for a preempted one."""
        return self.kept or bool(self.holders)


class CpuKvTier:
    """Block hashes held in host memory, a fixed number of blocks, least recently used out first."""

    def __init__(self, capacity_blocks: int, max_kept_blocks: int = 0) -> None:
        if capacity_blocks <= 0:
            raise ValueError("capacity_blocks must be > 0")
        if not 0 <= max_kept_blocks <= capacity_blocks:
            raise ValueError("max_kept_blocks must be in [0, capacity_blocks]")
        self.capacity_blocks = capacity_blocks
        self.max_kept_blocks = max_kept_blocks
        self._kept = 0  # spared blocks: kept or held
        self._held: dict[str, tuple[Hashable, ...]] = {}  # preempted request -> the blocks it holds
        self._blocks: OrderedDict[Hashable, _Block] = OrderedDict()  # least recently used first
        self.counters = TierCounters()

    def __len__(self) -> int:
        """Blocks held, write-pending ones included (they take their host memory at once)."""
        return len(self._blocks)

    def __contains__(self, block_hash: Hashable) -> bool:
        return block_hash in self._blocks

    def is_ready(self, block_hash: Hashable) -> bool:
        block = self._blocks.get(block_hash)
        return block is not None and block.ready

    @property
    def pinned_blocks(self) -> int:
        """Blocks a store or load in flight holds (write-pending or being read)."""
        return sum(1 for b in self._blocks.values() if not b.evictable)

    def lookup(self, hashes: Sequence[Hashable]) -> int | None:
        """How many consecutive blocks from `hashes[0]` are hits; None if one of them is still being
        stored (vLLM then defers the lookup: `_maximal_prefix_lookup` returns None on HIT_PENDING)."""
        n = 0
        pending = False
        for block_hash in hashes:
            block = self._blocks.get(block_hash)
            if block is None:
                break
            pending |= not block.ready
            n += 1
        return None if pending else n

    def prepare_store(self, hashes: Sequence[Hashable]) -> list[Hashable] | None:
        """Insert the blocks not yet held as write-pending (most recent last) and return them, evicting
        the least recently used evictable blocks as needed; None (nothing changed) if too few are."""
        offered = set(hashes)
        new = [h for h in dict.fromkeys(hashes) if h not in self._blocks]
        if not new:
            return []
        excess = len(self._blocks) + len(new) - self.capacity_blocks
        if excess > 0:
            victims = self._victims(excess, offered)
            if victims is None:
                self.counters.dropped_blocks += len(new)
                return None
            for block_hash in victims:
                self._kept -= self._blocks.pop(block_hash).spared
            self.counters.evicted_blocks += len(victims)
        for block_hash in new:
            self._blocks[block_hash] = _Block()
        return new

    def _victims(self, excess: int, offered: set[Hashable]) -> list[Hashable] | None:
        """The `excess` blocks to evict: evictable ordinary blocks (and kept ones beyond `max_kept_blocks`)
        least recently used first, then kept ones; None when too few are evictable."""
        over = self._kept - self.max_kept_blocks  # the least recently used kept blocks past the cap
        ordinary: list[Hashable] = []
        kept: list[Hashable] = []
        for block_hash, block in self._blocks.items():
            if len(ordinary) == excess:
                break
            as_kept = block.spared and over <= 0
            over -= block.spared
            if not block.evictable or block_hash in offered:
                continue
            (kept if as_kept else ordinary).append(block_hash)
        victims = ordinary + kept[: excess - len(ordinary)]
        if len(victims) < excess:
            return None
        spared = len(kept) - (excess - len(ordinary))
        self.counters.kept_spared_blocks += spared if spared > 0 and ordinary else 0
        self.counters.kept_evicted_blocks += sum(self._blocks[h].spared for h in victims)
        return victims

    def keep(self, hashes: Iterable[Hashable]) -> None:
        """Mark held blocks as a protected request's: evicted after ordinary ones (`max_kept_blocks` > 0)."""
        if self.max_kept_blocks == 0:
            return
        for block_hash in hashes:
            block = self._blocks.get(block_hash)
            if block is not None and not block.kept:
                self._kept += not block.spared
                block.kept = True

    def hold(self, owner: str, hashes: Iterable[Hashable]) -> int:
        """Spare the held blocks among `hashes` (in prefix order) for `owner`, a preempted request, until
        `release(owner)` (`max_kept_blocks` > 0; a second hold by the same owner replaces the first). They
        become the most recent blocks, the first of them the most recent of all (as `touch`), so that
        past the cap a hit loses its tail rather than its head. Returns how many blocks it holds."""
        self.release(owner)
        if self.max_kept_blocks == 0:
            return 0
        held = tuple(h for h in dict.fromkeys(hashes) if h in self._blocks)
        self.touch(held)  # its first block the most recent: past the cap its tail goes first, not its head
        for block_hash in held:
            block = self._blocks[block_hash]
            self._kept += not block.spared
            block.holders.add(owner)
        if held:
            self._held[owner] = held
        return len(held)

    def release(self, owner: str) -> None:
        """`owner` came back (or ended): its held blocks are ordinary again, unless kept or held by another."""
        for block_hash in self._held.pop(owner, ()):
            block = self._blocks.get(block_hash)
            if block is not None and owner in block.holders:
                block.holders.discard(owner)
                self._kept -= not block.spared

    @property
    def kept_blocks(self) -> int:
        """Blocks kept or held (spared), within the cap or not."""
        return self._kept

    @property
    def held_owners(self) -> int:
        """Preempted requests holding blocks now."""
        return len(self._held)

    def complete_store(self, hashes: Iterable[Hashable]) -> None:
        for block_hash in hashes:
            block = self._blocks.get(block_hash)
            if block is not None and not block.ready:
                block.ready = True
                self.counters.stored_blocks += 1

    def prepare_load(self, hashes: Iterable[Hashable]) -> None:
        for block_hash in hashes:
            block = self._blocks[block_hash]
            assert block.ready, "a load reads only completed blocks"
            block.pins += 1
            self.counters.hit_blocks += 1

    def complete_load(self, hashes: Iterable[Hashable]) -> None:
        for block_hash in hashes:
            block = self._blocks[block_hash]
            assert block.pins > 0
            block.pins -= 1

    def touch(self, hashes: Sequence[Hashable]) -> None:
        """A request that used these blocks (in prefix order) finished: they become the most recent,
        its first block the most recent of all."""
        for block_hash in reversed(hashes):
            if block_hash in self._blocks:
                self._blocks.move_to_end(block_hash)
