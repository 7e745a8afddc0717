"""The simulated CPU KV tier: block hashes kept in host memory, least recently used out first.

vLLM's offloading connector (`--kv-offloading-size`) copies KV blocks to CPU memory as they are
computed and loads them back on a prefix hit instead of recomputing them. It does not run on the
CPU backend, so the simulator keeps this equivalent: the tier holds the hashes of full blocks the
engine computed (write-through, stores cost no step time as the copies overlap compute), bounded by
`capacity_blocks`, evicting the least recently used; a request resuming after preemption or eviction
gets the longest run of its next blocks that the tier still holds, priced at the profile's load
bandwidth (`StepTimeProfile.load_time`).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable, Sequence
from dataclasses import dataclass


@dataclass
class TierCounters:
    stored_blocks: int = 0
    evicted_blocks: int = 0
    hit_blocks: int = 0


class CpuKvTier:
    """An LRU set of block hashes with a fixed capacity in blocks."""

    def __init__(self, capacity_blocks: int) -> None:
        if capacity_blocks <= 0:
            raise ValueError("capacity_blocks must be > 0")
        self.capacity_blocks = capacity_blocks
        self._blocks: OrderedDict[Hashable, None] = OrderedDict()
        self.counters = TierCounters()

    def __len__(self) -> int:
        return len(self._blocks)

    def store(self, hashes: Sequence[Hashable]) -> None:
        """Keep these blocks (most recent last), evicting the least recently used beyond capacity."""
        for block_hash in hashes:
            if block_hash in self._blocks:
                self._blocks.move_to_end(block_hash)
                continue
            self._blocks[block_hash] = None
            self.counters.stored_blocks += 1
            if len(self._blocks) > self.capacity_blocks:
                self._blocks.popitem(last=False)
                self.counters.evicted_blocks += 1

    def match(self, hashes: Sequence[Hashable], start: int) -> int:
        """How many consecutive blocks from `hashes[start]` on the tier holds (touching them)."""
        n = 0
        for block_hash in hashes[start:]:
            if block_hash not in self._blocks:
                break
            self._blocks.move_to_end(block_hash)
            n += 1
        self.counters.hit_blocks += n
        return n
