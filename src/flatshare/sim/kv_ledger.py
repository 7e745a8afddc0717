"""Where a simulated engine's KV cache went: block-seconds held by each priority, and free, over a window.

The engine adds every step it launches (`SimEngine._launch`) that starts before `until_s` (None: every
step; the run's driver sets the run's duration, as for the step ledger), weighted by the step's time (from
its start to its end), with the scheduler's state once the step is scheduled: the blocks each live request
holds (a block several requests hold counts once, for the most protected of them: the lowest priority
value), and vLLM's free blocks (unheld, cached ones included: what `vllm:kv_cache_usage_perc` leaves out).
`free_block_s_waiting` is the free block-seconds of steps during which some request waited for admission:
memory that work wanting memory did not get (the head of the queue did not fit, or was held).
`loading_block_s` is the part of the held block-seconds whose request was waiting for an asynchronous KV
load (admitted, its blocks allocated, nothing of it scheduled until the load is in).

The sums are raw block-seconds, so several engines' ledgers add (`flatshare.sim.step_ledger.summed`);
`shares` turns one into shares of the cache's block-seconds (`cache_block_s`).

Read in the co-location report ("Where the KV cache went", `flatshare.colocation.kv_markdown`): at 6 voice
callers the agents are held back by memory they do not get, not by the GPU's time (docs/make-room.md).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

HELD_PREFIX = "held_block_s_priority_"


def held_key(priority: int) -> str:
    """The ledger's key for the block-seconds held by requests of `priority`."""
    return f"{HELD_PREFIX}{priority}"


def held_by_priority(holders: Iterable[tuple[int, Iterable[int]]]) -> dict[int, int]:
    """Blocks held per priority from `(priority, block ids)` per request: a block held by several requests
    counts once, for the lowest priority value among them."""
    owner: dict[int, int] = {}
    for priority, blocks in holders:
        for block in blocks:
            held = owner.get(block)
            if held is None or priority < held:
                owner[block] = priority
    counts: dict[int, int] = {}
    for priority in owner.values():
        counts[priority] = counts.get(priority, 0) + 1
    return counts


@dataclass
class KvLedger:
    """Running block-second sums over the steps that start before `until_s`."""

    until_s: float | None = None
    seconds: float = 0.0
    cache_block_s: float = 0.0
    free_block_s: float = 0.0
    free_block_s_waiting: float = 0.0
    loading_block_s: float = 0.0
    held_block_s: dict[int, float] = field(default_factory=dict)

    def counts(self, start_s: float) -> bool:
        """Whether a step starting at `start_s` lies in the window (`add` ignores the others)."""
        return self.until_s is None or start_s < self.until_s

    def add(
        self,
        start_s: float,
        end_s: float,
        held: Mapping[int, int],
        free_blocks: int,
        total_blocks: int,
        waiting: bool,
        loading_blocks: int = 0,
    ) -> None:
        """Count one launched step from `start_s` to `end_s` (ignored when it starts at or after `until_s`):
        `held` blocks per priority, `free_blocks` of `total_blocks`, whether a request waited, and the held
        blocks of requests waiting for an asynchronous load (`loading_blocks`)."""
        if not self.counts(start_s):
            return
        if end_s < start_s or total_blocks <= 0 or free_blocks < 0:
            raise ValueError("a step ends after it starts, on a cache of blocks, with free blocks >= 0")
        if sum(held.values()) + free_blocks > total_blocks:
            raise ValueError("held and free blocks exceed the cache")
        if not 0 <= loading_blocks <= sum(held.values()):
            raise ValueError("loading blocks are some of the held ones")
        dt = end_s - start_s
        self.seconds += dt
        self.cache_block_s += total_blocks * dt
        self.free_block_s += free_blocks * dt
        if waiting:
            self.free_block_s_waiting += free_blocks * dt
        self.loading_block_s += loading_blocks * dt
        for priority, blocks in held.items():
            self.held_block_s[priority] = self.held_block_s.get(priority, 0.0) + blocks * dt

    def to_json(self) -> dict[str, float]:
        """The sums, rounded to the microsecond (block-seconds to 1e-6), and `window_s` when set."""
        out = {
            "seconds": round(self.seconds, 6),
            "cache_block_s": round(self.cache_block_s, 6),
            "free_block_s": round(self.free_block_s, 6),
            "free_block_s_waiting": round(self.free_block_s_waiting, 6),
            "loading_block_s": round(self.loading_block_s, 6),
        }
        if self.until_s is not None:
            out["window_s"] = float(self.until_s)
        for priority in sorted(self.held_block_s):
            out[held_key(priority)] = round(self.held_block_s[priority], 6)
        return out


def shares(ledger: Mapping[str, float | None]) -> dict[str, float]:
    """A `to_json` table (or a mean of several) as shares of the cache's block-seconds: `free`,
    `free_waiting`, `loading`, and `priority_<p>` per priority held; empty when it counted no time."""
    total = ledger.get("cache_block_s") or 0.0
    if total <= 0:
        return {}
    out = {
        "free": float(ledger.get("free_block_s") or 0.0) / total,
        "free_waiting": float(ledger.get("free_block_s_waiting") or 0.0) / total,
        "loading": float(ledger.get("loading_block_s") or 0.0) / total,
    }
    for key, value in ledger.items():
        if key.startswith(HELD_PREFIX) and value is not None:
            out[f"priority_{key.removeprefix(HELD_PREFIX)}"] = float(value) / total
    return out
