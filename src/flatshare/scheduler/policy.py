"""make-room's decisions as pure functions of plain values: victims, freed blocks, the hold.

Nothing here imports vLLM; `make_room.py` reads the scheduler's state into these types.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class RunningView:
    """A running request as victim choice sees it: its priority, arrival and KV block ids."""

    request_id: str
    priority: int
    arrival_time: float
    block_ids: tuple[int, ...]


@dataclass(frozen=True)
class VictimChoice:
    """Requests to preempt (in order) and the blocks that frees; `declined` when they would not suffice."""

    victims: tuple[str, ...]
    freed_blocks: int
    declined: bool


def vllm_victim_order(running: Iterable[RunningView]) -> list[RunningView]:
    """vLLM's order for the priority policy: the largest (priority, arrival_time) goes first."""
    return sorted(running, key=lambda r: (r.priority, r.arrival_time), reverse=True)


def blocks_freed(victims: Sequence[RunningView], ref_counts: dict[int, int]) -> int:
    """Blocks that preempting all `victims` returns to the free pool.

    A block is freed only when every holder of it is among the victims: a block shared with a request
    that keeps running (a common prefix) frees nothing.
    """
    held = Counter(block for victim in victims for block in set(victim.block_ids))
    return sum(1 for block, n in held.items() if ref_counts.get(block, 0) <= n)


def choose_victims(
    running: Iterable[RunningView],
    waiting_priority: int,
    needed_blocks: int,
    max_victims: int,
    ref_counts: dict[int, int],
) -> VictimChoice:
    """Pick at most `max_victims` strictly lower-priority requests, in vLLM's order, freeing enough.

    Takes victims one by one until the blocks they would free reach `needed_blocks`. If `max_victims`
    victims (or all candidates) would not free enough, preempts nobody, and reports `declined` if
    there was any candidate at all.
    """
    if needed_blocks <= 0:
        return VictimChoice((), 0, False)
    candidates = [r for r in vllm_victim_order(running) if r.priority > waiting_priority]
    chosen: list[RunningView] = []
    for candidate in candidates[:max_victims]:
        chosen.append(candidate)
        freed = blocks_freed(chosen, ref_counts)
        if freed >= needed_blocks:
            return VictimChoice(tuple(r.request_id for r in chosen), freed, False)
    return VictimChoice((), 0, bool(candidates))


def blocks_needed(
    tokens_after_step: int, block_size: int, cached_held_blocks: int, watermark_blocks: int
) -> int:
    """Free blocks a waiting request needs: for `tokens_after_step` tokens in all (its prefix-cache
    hit included), less `cached_held_blocks`, hit blocks other requests hold (they cost no free block),
    plus vLLM's watermark."""
    return -(-tokens_after_step // block_size) - cached_held_blocks + watermark_blocks


def hold_threshold(window_priorities: Iterable[int]) -> int | None:
    """Requests with a priority value above this are held; None when no protected window is open."""
    return min(window_priorities, default=None)


def in_window(priority: int, output_tokens: int, protect_priority: int, window_tokens: int) -> bool:
    """Whether a live request opens a hold window: protected, and fewer than T tokens out."""
    return window_tokens > 0 and priority <= protect_priority and output_tokens < window_tokens


def is_held(priority: int, threshold: int | None, is_prefill: bool, hold_decode: bool) -> bool:
    """Whether a request gets no tokens this step under the hold."""
    if threshold is None or priority <= threshold:
        return False
    return is_prefill or hold_decode
