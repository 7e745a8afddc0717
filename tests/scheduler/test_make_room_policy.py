"""make-room's pure decisions, without vLLM."""

from __future__ import annotations

import dataclasses

import pytest

from flatshare.scheduler.config import MakeRoomConfig, MakeRoomConfigError
from flatshare.scheduler.policy import (
    RunningView,
    WaitingNeed,
    blocks_freed,
    choose_victims,
    fits,
    hold_allowed,
    hold_threshold,
    in_window,
    is_held,
    vllm_victim_order,
)


def view(
    rid: str, priority: int, arrival: float, blocks: range | tuple[int, ...], tokens: int = 1, new: int = 0
) -> RunningView:
    return RunningView(rid, priority, arrival, tuple(blocks), tokens, new)


def need(
    blocks: int, free: int, seats: int = 10, budget: int = 512, hits: tuple[int, ...] = ()
) -> WaitingNeed:
    return WaitingNeed(blocks, frozenset(hits), 0, free, seats, budget)


def test_victims_follow_vllms_priority_order() -> None:
    running = [view("a", 10, 1.0, ()), view("b", 10, 2.0, ()), view("c", 20, 0.5, ()), view("v", 0, 3.0, ())]
    assert [r.request_id for r in vllm_victim_order(running)] == ["c", "b", "a", "v"]


def test_shared_blocks_free_nothing_unless_every_holder_goes() -> None:
    a = view("a", 10, 0.0, (1, 2, 3, 4))
    b = view("b", 10, 0.0, (1, 2, 5))  # blocks 1, 2 are a shared prefix
    refs = {1: 2, 2: 2, 3: 1, 4: 1, 5: 1}
    assert blocks_freed([a], refs) == 2
    assert blocks_freed([a, b], refs) == 5


def test_choose_victims_takes_the_fewest_in_order() -> None:
    running = [view("a", 10, 0.0, range(0, 10)), view("b", 10, 1.0, range(10, 30))]
    refs = {i: 1 for i in range(30)}
    choice = choose_victims(need(15, 0), running, 0, max_victims=2, ref_counts=refs)
    assert choice.victims == ("b",) and choice.admitted and not choice.declined


def test_choose_victims_declines_when_max_victims_would_not_suffice() -> None:
    running = [view(f"r{i}", 10, float(i), range(10 * i, 10 * i + 10)) for i in range(4)]
    refs = {i: 1 for i in range(40)}
    choice = choose_victims(need(25, 0), running, 0, max_victims=2, ref_counts=refs)
    assert choice.victims == () and choice.declined and not choice.admitted


def test_choose_victims_never_takes_equal_or_higher_priority() -> None:
    running = [view("a", 5, 0.0, range(10)), view("b", 0, 1.0, range(10, 20))]
    refs = {i: 1 for i in range(20)}
    choice = choose_victims(need(1, 0), running, 5, max_victims=2, ref_counts=refs)
    assert choice.victims == () and not choice.declined and not choice.admitted


def test_a_hit_on_a_victims_blocks_is_not_counted_twice() -> None:
    # The waiting request's 32-block prefix hit lives in the victim's blocks 0-31: preempting the
    # victim frees them, and then each costs the waiting request a block again.
    victim = view("v", 10, 0.0, range(0, 32))
    other = view("x", 0, 0.0, range(32, 40))
    refs = {i: 1 for i in range(40)}
    hit = tuple(range(32))
    admission = need(25, free=24, hits=hit)
    assert not fits(admission, [victim, other], [victim], refs)
    choice = choose_victims(admission, [victim, other], 0, max_victims=2, ref_counts=refs)
    assert choice.victims == () and choice.declined


def test_blocks_the_running_requests_take_first_count() -> None:
    a = view("a", 10, 0.0, range(0, 4), tokens=1, new=1)
    b = view("b", 0, 1.0, range(4, 8), tokens=1, new=3)
    refs = {i: 1 for i in range(8)}
    assert fits(need(5, free=9), [a, b], [], refs)
    assert not fits(need(5, free=8), [a, b], [], refs)
    assert fits(need(5, free=4), [a, b], [a], refs)
    assert not fits(need(5, free=3), [a, b], [a], refs)  # a leaves: its 4 blocks back, its 1 not taken


def test_a_seat_is_freed_only_when_asked() -> None:
    running = [view("a", 10, 0.0, range(0, 4)), view("b", 10, 1.0, range(4, 8))]
    refs = {i: 1 for i in range(8)}
    seats = choose_victims(need(2, free=100, seats=0), running, 0, 2, refs)
    assert seats.victims == ("b",) and seats.for_seats and seats.admitted
    off = choose_victims(need(2, free=100, seats=0), running, 0, 2, refs, for_seats=False)
    assert off.victims == () and not off.admitted


def test_no_victim_when_the_running_requests_use_the_whole_budget() -> None:
    running = [view("a", 0, 0.0, range(4), tokens=512)]
    assert not fits(need(1, free=100, budget=512), running, [], {i: 1 for i in range(4)})


def test_the_hold_bound() -> None:
    assert hold_allowed(0, 256) and hold_allowed(255, 256) and not hold_allowed(256, 256)


def test_the_hold_window() -> None:
    assert in_window(0, 47, protect_priority=0, window_tokens=48)
    assert not in_window(0, 48, protect_priority=0, window_tokens=48)
    assert not in_window(1, 0, protect_priority=0, window_tokens=48)
    assert not in_window(0, 0, protect_priority=0, window_tokens=0)
    assert hold_threshold([3, 0, 1]) == 0 and hold_threshold([]) is None
    assert is_held(10, 0, is_prefill=True, hold_decode=False)
    assert not is_held(10, 0, is_prefill=False, hold_decode=False)
    assert is_held(10, 0, is_prefill=False, hold_decode=True)
    assert not is_held(0, 0, is_prefill=True, hold_decode=True)
    assert not is_held(10, None, is_prefill=True, hold_decode=True)


@pytest.mark.parametrize(
    ("section", "message"),
    [
        ({"enabled": "yes"}, "enabled must be true or false"),
        ({"max_victims": 0}, "max_victims must be an integer >= 1"),
        ({"window_tokens": -1}, "window_tokens"),
        ({"protect_priority": 1.5}, "protect_priority"),
        ({"windw_tokens": 8}, "unknown key"),
        ({"max_hold_steps": 0}, "max_hold_steps must be an integer >= 1"),
        ({"preempt_for_seats": 1}, "preempt_for_seats must be true or false"),
    ],
)
def test_invalid_config_is_a_clear_error(section: dict[str, object], message: str) -> None:
    with pytest.raises(MakeRoomConfigError, match=message):
        MakeRoomConfig.from_additional_config({"make_room": section})


def test_absent_config_means_disabled() -> None:
    assert MakeRoomConfig.from_additional_config(None) == MakeRoomConfig(enabled=False)


def test_a_victim_under_a_deferred_free_gives_its_seat_but_not_its_blocks() -> None:
    deferred = RunningView("a", 10, 0.0, tuple(range(4)), 1, 0, freeable=False)
    refs = {i: 1 for i in range(4)}
    assert blocks_freed([deferred], refs) == 0
    seat = choose_victims(need(2, free=10, seats=0), [deferred], 0, 2, refs)
    assert seat.victims == ("a",) and seat.for_seats
    assert not choose_victims(need(12, free=10), [deferred], 0, 2, refs).admitted


def test_victims_whose_blocks_come_back_after_the_step_in_flight_admit_it_in_the_next_step() -> None:
    # Async scheduling with a KV connector: a running request scheduled in the step in flight frees its
    # blocks only once that step is processed. Preempting it still makes room, one step later.
    deferred = RunningView("a", 10, 0.0, tuple(range(4)), 1, 0, freeable=False)
    refs = {i: 1 for i in range(4)}
    later = choose_victims(need(12, free=10), [deferred], 0, 2, refs)
    assert later.victims == ("a",) and later.next_step and not later.admitted and not later.declined
    assert fits(need(12, free=10), [deferred], [deferred], refs, deferred=True)
    assert not fits(need(12, free=10), [deferred], [deferred], refs)
    # Too little even when the blocks are back: nobody is preempted.
    short = choose_victims(need(15, free=10), [deferred], 0, 2, refs)
    assert short.victims == () and short.declined and not short.next_step
    # Not when the request cannot be admitted next step anyway (make-room's hold is back then).
    now_only = choose_victims(need(12, free=10), [deferred], 0, 2, refs, next_step=False)
    assert now_only.victims == () and now_only.declined and not now_only.next_step


def test_the_next_step_count_takes_the_staying_requests_growth_in_that_step_too() -> None:
    # Found by the invariant suite's soak (async scheduling, CPU tier): make-room preempted a victim under
    # a deferred free for a request needing 30 blocks, counting 26 free + 5 back - 1 for a staying decode
    # crossing a block boundary this step; in the next step another staying decode crossed one first and
    # 29 were free. The request missed the step and the preemption was wasted.
    victim = RunningView("victim", 10, 0.0, tuple(range(5)), 1, 0, freeable=False)
    now = RunningView("now", 1, 1.0, tuple(range(5, 26)), 1, 1, next_tokens=1)
    later = RunningView("later", 1, 2.0, tuple(range(26, 45)), 1, 0, next_tokens=1, next_blocks=1)
    refs = {i: 1 for i in range(45)}
    running = [victim, now, later]
    assert fits(need(30, free=26), running, [victim], refs, deferred=True)  # one step's growth: 26 + 5 - 1
    assert not fits(need(30, free=26), running, [victim], refs, deferred=True, next_step=True)  # 29 < 30
    short = choose_victims(need(30, free=26), running, 5, 2, refs)
    assert short.victims == () and short.declined and not short.next_step
    assert choose_victims(need(29, free=26), running, 5, 2, refs).next_step


def test_the_next_step_budget_is_what_the_staying_requests_take_in_that_step() -> None:
    victim = RunningView("victim", 10, 0.0, tuple(range(4)), 1, 0, freeable=False)
    chunk = RunningView("chunk", 1, 1.0, (4,), 100, 0, next_tokens=512)  # its prompt's next chunk
    refs = {i: 1 for i in range(5)}
    assert fits(need(4, free=2), [victim, chunk], [victim], refs, deferred=True)
    assert not fits(need(4, free=2), [victim, chunk], [victim], refs, deferred=True, next_step=True)
    assert choose_victims(need(4, free=2), [victim, chunk], 5, 2, refs).declined


def test_the_fewest_victims_are_taken_even_if_more_would_admit_it_a_step_sooner() -> None:
    # "b" (vLLM's first victim) is under a deferred free; "a" frees at once. One victim is enough once
    # b's blocks are back, so make-room takes b alone rather than b and a for a step sooner.
    a = RunningView("a", 10, 0.0, tuple(range(0, 10)), 1, 0)
    b = RunningView("b", 10, 1.0, tuple(range(10, 20)), 1, 0, freeable=False)
    refs = {i: 1 for i in range(20)}
    choice = choose_victims(need(8, free=0), [a, b], 0, 2, refs)
    assert choice.victims == ("b",) and choice.next_step
    # When vLLM's first victim frees at once, it is admitted this step.
    c = RunningView("c", 10, 2.0, tuple(range(20, 30)), 1, 0)
    refs.update({i: 1 for i in range(20, 30)})
    now = choose_victims(need(8, free=0), [a, b, c], 0, 2, refs)
    assert now.victims == ("c",) and now.admitted and not now.next_step


def _decodes(n: int, lora: int = 0) -> list[RunningView]:
    return [RunningView(f"d{i}", 10, float(i), (1000 + i,), 1, 0, lora_id=lora) for i in range(n)]


def test_a_parallel_drafters_slots_use_up_the_input_budget() -> None:
    # 128 decodes with 3 draft slots each take 512 input slots: vLLM's waiting loop stops
    # (`input_budget <= draft_slots`). Counted as tokens only (128 < 512), make-room predicted admission.
    need = WaitingNeed(1, frozenset(), 0, 100, 10, 512, input_budget=512, draft_slots=3)
    assert not fits(need, _decodes(128), (), {})
    assert fits(need, _decodes(126), (), {})  # 504 slots taken, 8 left: 3 for the request's drafts
    assert choose_victims(need, _decodes(128), 0, 2, {}).victims == ("d127",)  # 508 taken: 1 token left


def test_without_chunked_prefill_the_whole_prompt_must_fit_the_budget_left() -> None:
    need = WaitingNeed(1, frozenset(), 0, 100, 20, 2048, chunk_tokens=2040)
    assert not fits(need, _decodes(12), (), {})  # 2,036 left
    assert fits(need, _decodes(8), (), {})
    assert not choose_victims(need, _decodes(12), 0, 2, {}).admitted  # two victims leave 2,038


def test_a_lora_slot_taken_by_a_staying_request_refuses_another_adapter() -> None:
    need = WaitingNeed(1, frozenset(), 0, 100, 10, 512, lora_id=2, max_loras=1)
    running = _decodes(1, lora=1) + _decodes(2)
    assert not fits(need, running, (), {})
    assert fits(need, running, running[:1], {})  # preempting the adapter-1 request frees the slot
    assert fits(dataclasses.replace(need, lora_id=1), running, (), {})
