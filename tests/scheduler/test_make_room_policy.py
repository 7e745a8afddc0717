"""make-room's pure decisions, without vLLM."""

from __future__ import annotations

import pytest

from flatshare.scheduler.config import MakeRoomConfig, MakeRoomConfigError
from flatshare.scheduler.policy import (
    RunningView,
    blocks_freed,
    blocks_needed,
    choose_victims,
    hold_threshold,
    in_window,
    is_held,
    vllm_victim_order,
)


def view(rid: str, priority: int, arrival: float, blocks: range | tuple[int, ...]) -> RunningView:
    return RunningView(rid, priority, arrival, tuple(blocks))


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
    choice = choose_victims(running, waiting_priority=0, needed_blocks=15, max_victims=2, ref_counts=refs)
    assert choice.victims == ("b",) and choice.freed_blocks == 20 and not choice.declined


def test_choose_victims_declines_when_max_victims_would_not_suffice() -> None:
    running = [view(f"r{i}", 10, float(i), range(10 * i, 10 * i + 10)) for i in range(4)]
    refs = {i: 1 for i in range(40)}
    choice = choose_victims(running, waiting_priority=0, needed_blocks=25, max_victims=2, ref_counts=refs)
    assert choice.victims == () and choice.declined


def test_choose_victims_never_takes_equal_or_higher_priority() -> None:
    running = [view("a", 5, 0.0, range(10)), view("b", 0, 1.0, range(10, 20))]
    refs = {i: 1 for i in range(20)}
    choice = choose_victims(running, waiting_priority=5, needed_blocks=1, max_victims=2, ref_counts=refs)
    assert choice.victims == () and not choice.declined


def test_blocks_needed_counts_held_cache_hits_as_free() -> None:
    assert blocks_needed(100, 16, cached_held_blocks=0, watermark_blocks=0) == 7
    assert blocks_needed(100, 16, cached_held_blocks=3, watermark_blocks=1) == 5


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
    ],
)
def test_invalid_config_is_a_clear_error(section: dict[str, object], message: str) -> None:
    with pytest.raises(MakeRoomConfigError, match=message):
        MakeRoomConfig.from_additional_config({"make_room": section})


def test_absent_config_means_disabled() -> None:
    assert MakeRoomConfig.from_additional_config(None) == MakeRoomConfig(enabled=False)
