"""make-room's decisions as pure functions of plain values: admission (a `WaitingNeed`), victims, the hold.

Nothing here imports vLLM; `vllm_view.py` reads the scheduler's state into these types, in the terms vLLM's
own admission uses (blocks as `allocate_slots` counts them, seats, the token budget left after the
running requests), so a decision to preempt is one that vLLM will then act on in the same step.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace


@dataclass(frozen=True)
class RunningView:
    """A running request as victim choice sees it: priority, arrival, KV block ids of all groups, what
    the running loop would give it this step if it stays (tokens and new blocks), whether vLLM frees
    its blocks at once when it is preempted (not under a deferred free, which still frees its seat), and
    what the running loop would give it in the step after (`next_tokens`, and `next_blocks` new blocks
    on top of `step_blocks`), which comes before a request admitted in that step, and its LoRA adapter
    (`lora_id`, 0 for none), which takes one of the step's `max_loras` slots when it is scheduled."""

    request_id: str
    priority: int
    arrival_time: float
    block_ids: tuple[int, ...]
    step_tokens: int = 0
    step_blocks: int = 0
    freeable: bool = True
    next_tokens: int = 0
    next_blocks: int = 0
    lora_id: int = 0


UNBOUNDED_BUDGET = 1 << 62
"""A step budget no request reaches (`WaitingNeed.without_budgets`: SGLang preempts only when a request
does not fit in memory or seats, never for compute budget)."""


@dataclass(frozen=True)
class WaitingNeed:
    """What a waiting request needs from this step, as vLLM's waiting loop would check it.

    `request_blocks`: free blocks its allocation takes now (vLLM's own count, all KV groups, evictable
    prefix hits included); `hit_block_ids`: its prefix-hit blocks other requests hold now (free now,
    they cost a block each once every holder is preempted); `watermark_blocks`: vLLM's watermark,
    applied only while some request stays running; `free_blocks`, `seats_free` (under `max_num_seqs`)
    and `token_budget` (before the running loop takes its share) are the step's resources.
    `load_reserved_blocks`: when the request may be admitted into an asynchronous KV-connector load,
    vLLM admits it only into the free blocks less what in-flight prefills still need to finish
    (`Scheduler._inflight_prefill_reserved_blocks`): `(request_id, blocks)` per such prefill; a
    preempted one gives its reservation up.
    `input_budget` (vLLM's `max_num_batched_tokens`) and `draft_slots`: with a parallel drafter every
    scheduled request also takes `draft_slots` input slots, and a waiting request needs `draft_slots`
    more than its chunk (0 means the input budget is the token budget). `chunk_tokens`: with chunked
    prefill off, the tokens the request must schedule at once (vLLM refuses it when the budget left is
    smaller); 0 with chunked prefill on. `lora_id` and `max_loras`: vLLM skips a request whose adapter
    would make the step serve more than `max_loras` adapters (0: no LoRA).
    """

    request_blocks: int
    hit_block_ids: frozenset[int]
    watermark_blocks: int
    free_blocks: int
    seats_free: int
    token_budget: int
    load_reserved_blocks: tuple[tuple[str, int], ...] = ()
    input_budget: int = 0
    draft_slots: int = 0
    chunk_tokens: int = 0
    lora_id: int = 0
    max_loras: int = 0

    def budget_left(self, tokens: Sequence[int]) -> int:
        """The tokens vLLM's waiting loop may give the request after the running requests that stay
        took `tokens` (vLLM's `request_token_budget`); admitted only when this is > 0."""
        used = sum(tokens)
        scheduled = sum(1 for n in tokens if n > 0)
        inputs = (self.input_budget or self.token_budget) - used - scheduled * self.draft_slots
        return min(self.token_budget - used, inputs - self.draft_slots)

    def without_budgets(self) -> WaitingNeed:
        """The same need with no step budget to refuse it (neither the token budget nor the input
        budget `budget_left` reads): for a rule that triggers on memory and seats only."""
        return replace(self, token_budget=UNBOUNDED_BUDGET, input_budget=UNBOUNDED_BUDGET)

    def lora_refused(self, scheduled_loras: Iterable[int]) -> bool:
        """Whether vLLM skips the request for its adapter, given the adapters of the running requests
        that stay (vLLM's `max_loras` check: in stock vLLM every running request is scheduled before a
        waiting one is tried, and make-room counts held ones as scheduled)."""
        if not self.max_loras or not self.lora_id:
            return False
        loras = {lora for lora in scheduled_loras if lora > 0}
        return len(loras) >= self.max_loras and self.lora_id not in loras


@dataclass(frozen=True)
class VictimChoice:
    """Requests to preempt (in order) so that the waiting request is admitted in this step.

    `admitted`: the request will be admitted (with these victims, possibly none); `declined`: some
    candidates existed but `max_victims` of them would not make it fit; `for_seats`: a victim was needed
    for a seat rather than for blocks; `next_step`: the victims free their blocks only when the step in
    flight has been processed (vLLM's deferred free under async scheduling with a KV connector), so the
    request is not admitted this step but fits in the next one (`admitted` is then False).
    """

    victims: tuple[str, ...]
    admitted: bool
    declined: bool = False
    for_seats: bool = False
    next_step: bool = False


def vllm_victim_order(running: Iterable[RunningView]) -> list[RunningView]:
    """vLLM's order for the priority policy: the largest (priority, arrival_time) goes first."""
    return sorted(running, key=lambda r: (r.priority, r.arrival_time), reverse=True)


def blocks_freed(victims: Sequence[RunningView], ref_counts: dict[int, int]) -> int:
    """Blocks that preempting all `victims` returns to the free pool.

    A block is freed only when every holder of it is among the victims: a block shared with a request
    that keeps running (a common prefix) frees nothing.
    """
    return len(_released(victims, ref_counts))


def _released(victims: Sequence[RunningView], ref_counts: dict[int, int], deferred: bool = False) -> set[int]:
    """Blocks back in the pool this step; a victim under a deferred free returns its blocks only once the
    step in flight is processed (counted too when `deferred`)."""
    held = Counter(
        block for victim in victims if victim.freeable or deferred for block in set(victim.block_ids)
    )
    return {block for block, n in held.items() if ref_counts.get(block, 0) <= n}


def fits(
    waiting: WaitingNeed,
    running: Sequence[RunningView],
    victims: Sequence[RunningView],
    ref_counts: dict[int, int],
    deferred: bool = False,
    next_step: bool = False,
) -> bool:
    """Whether vLLM admits the waiting request this step once `victims` are preempted. With `deferred`,
    their deferred frees, if any, count as back; with `next_step`, the question is the next step's: the
    staying requests have taken this step's blocks and take their `next_tokens` and `next_blocks` first.

    The running requests that stay are scheduled first and take their `step_tokens` and `step_blocks`;
    the request then needs a seat, some token budget (all its chunk with chunked prefill off), an
    adapter slot, and its blocks plus the watermark. Hit blocks that only victims held become
    evictable: each costs a free block, and was counted as freed.
    """
    gone = {v.request_id for v in victims}
    staying = [r for r in running if r.request_id not in gone]
    if waiting.seats_free + len(victims) <= 0:
        return False
    tokens = [r.next_tokens if next_step else r.step_tokens for r in staying]
    left = waiting.budget_left(tokens)
    if left <= 0 or waiting.chunk_tokens > left:
        return False
    if waiting.lora_refused(r.lora_id for r in staying):  # held ones too: `_new_adapter_past_limit`
        return False
    released = _released(victims, ref_counts, deferred)
    taken = {r.request_id: r.step_blocks + (r.next_blocks if next_step else 0) for r in staying}
    need = waiting.request_blocks + len(released & waiting.hit_block_ids) + sum(taken.values())
    need += waiting.watermark_blocks if staying else 0
    if waiting.load_reserved_blocks:  # what a staying prefill takes first is no longer reserved
        need += sum(
            max(n - taken.get(rid, 0), 0) for rid, n in waiting.load_reserved_blocks if rid not in gone
        )
    return need <= waiting.free_blocks + len(released)


def choose_victims(
    waiting: WaitingNeed,
    running: Sequence[RunningView],
    waiting_priority: int,
    max_victims: int,
    ref_counts: dict[int, int],
    for_seats: bool = True,
    next_step: bool = True,
) -> VictimChoice:
    """The fewest strictly lower-priority requests, taken in vLLM's order, that get the waiting request
    admitted; nobody if `max_victims` of them would not. Admitted this step when the victims' blocks
    come back at once; when some come back only after the step in flight (deferred frees), the same
    fewest victims are preempted now and the request fits in the next step (`next_step`), rather than
    taking more victims to be admitted one step sooner. The next step's count takes the staying
    requests' growth in both steps: counting one step's, make-room preempted a victim for a request
    that then missed the next step by the block a decoding request took in it. With `for_seats` false
    a victim is never taken only to free a seat (the waiting request then waits for one, as in stock
    vLLM); with `next_step` false only victims that admit it this step are taken."""
    if fits(waiting, running, (), ref_counts):
        return VictimChoice((), admitted=True)
    candidates = [r for r in vllm_victim_order(running) if r.priority > waiting_priority]
    seat_bound = waiting.seats_free <= 0
    if seat_bound and not for_seats:
        return VictimChoice((), admitted=False)
    chosen: list[RunningView] = []
    for candidate in candidates[:max_victims]:
        chosen.append(candidate)
        victims = tuple(r.request_id for r in chosen)
        if fits(waiting, running, chosen, ref_counts):
            return VictimChoice(victims, admitted=True, for_seats=seat_bound)
        deferred = next_step and any(not r.freeable for r in chosen)
        if deferred and fits(waiting, running, chosen, ref_counts, deferred=True, next_step=True):
            return VictimChoice(victims, admitted=False, for_seats=seat_bound, next_step=True)
    return VictimChoice((), admitted=False, declined=bool(candidates))


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


def hold_allowed(consecutive_hold_steps: int, max_hold_steps: int) -> bool:
    """The hold's bound: after `max_hold_steps` steps in a row that held something, one step holds
    nothing, so lower priorities always make progress."""
    return consecutive_hold_steps < max_hold_steps
