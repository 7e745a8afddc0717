"""Holding only while at risk (`hold_deadline_s`, `flatshare.scheduler.pace`): the pace's estimates, the
first-sentence lengths, the rule, and make-room on vLLM's real scheduler in the simulated engine."""

from __future__ import annotations

import pytest

from flatshare.scheduler import MakeRoomConfig, MakeRoomConfigError
from flatshare.scheduler.pace import MIN_SENTENCE_SAMPLES, SentenceLengths, StepPace, at_risk
from flatshare.sim.config import EngineConfig, fitting_model_len
from flatshare.sim.engine import SENTENCE_END_TOKEN, SimEngine, SimResult
from flatshare.sim.profile import load_profile
from flatshare.sim.requests import SimRequest
from simkit import by_id, req

pytestmark = pytest.mark.vllm


def test_the_pace_credits_each_interval_to_the_step_in_flight() -> None:
    pace = StepPace(lag=0, alpha=1.0)
    pace.step(0.0)
    pace.scheduled(held=True, chunked=False, empty=False)
    pace.step(0.02)  # the held step took 20 ms
    pace.scheduled(held=False, chunked=True, empty=False)
    pace.step(0.08)  # the chunked step took 60 ms
    pace.scheduled(held=False, chunked=False, empty=False)
    pace.step(0.10)  # decodes only, nothing held: neither estimate
    assert pace.held_s == pytest.approx(0.02) and pace.free_s == pytest.approx(0.06)


def test_under_async_scheduling_the_interval_is_the_previous_steps() -> None:
    pace = StepPace(lag=1, alpha=1.0)
    pace.step(0.0)
    pace.scheduled(held=False, chunked=True, empty=False)  # step 1
    pace.step(0.0)  # step 2 is scheduled while step 1 runs: nothing to credit yet
    pace.scheduled(held=True, chunked=False, empty=False)
    pace.step(0.06)  # step 1 ended: its 60 ms
    assert pace.free_s == pytest.approx(0.06) and pace.held_s is None
    with pytest.raises(ValueError):
        StepPace(lag=2)


def test_a_chunk_scheduled_now_ends_after_the_step_in_flight_and_its_own() -> None:
    """`chunk_end_s`: under synchronous steps a chunk step; under asynchronous ones the step in flight (a
    chunk step's cost if it carried one, a held step's if it held) and then the chunk's."""
    sync = StepPace(lag=0, alpha=1.0)
    assert sync.chunk_end_s() is None
    sync.step(0.0)
    sync.scheduled(held=False, chunked=True, empty=False)
    sync.step(0.06)
    assert sync.chunk_end_s() == pytest.approx(0.06)
    pace = StepPace(lag=1, alpha=1.0)
    for start, held, chunked in ((0.0, False, True), (0.0, True, False), (0.06, True, False)):
        pace.step(start)
        pace.scheduled(held=held, chunked=chunked, empty=False)
    pace.step(0.08)  # the chunk step took 60 ms, the held one 20 ms; a held step is in flight
    assert pace.chunk_end_s() == pytest.approx(0.06 + 0.02)
    pace.scheduled(held=False, chunked=True, empty=False)
    pace.step(0.10)  # a chunk step is in flight now
    assert pace.chunk_end_s() == pytest.approx(2 * 0.06)


def test_a_ride_step_scheduled_now_ends_after_the_step_in_flight_and_a_held_step_with_its_share() -> None:
    """`step_end_s`: a held step plus the ride's share of what a chunk step costs above it, after the step
    in flight under asynchronous steps; None until both kinds are measured."""
    pace = StepPace(lag=1, alpha=1.0)
    assert pace.step_end_s(0.25) is None
    for start, held, chunked in ((0.0, False, True), (0.0, True, False), (0.06, True, False)):
        pace.step(start)
        pace.scheduled(held=held, chunked=chunked, empty=False)
    pace.step(0.08)  # chunk 60 ms, held 20 ms; a held step in flight
    assert pace.step_end_s(0.25) == pytest.approx(0.02 + 0.02 + 0.25 * 0.04)
    assert pace.step_end_s(0.0) == pytest.approx(0.04)
    sync = StepPace(lag=0, alpha=1.0)
    for start, held, chunked in ((0.0, False, True), (0.06, True, False)):
        sync.step(start)
        sync.scheduled(held=held, chunked=chunked, empty=False)
    sync.step(0.08)
    assert sync.step_end_s(1.0) == pytest.approx(0.06)  # a full chunk's share: a chunk step


def test_the_averages_follow_the_newest_steps() -> None:
    pace = StepPace(alpha=0.5)
    for t, duration in enumerate((0.02, 0.04)):
        pace.step(t * 1.0)
        pace.scheduled(held=True, chunked=False, empty=False)
        pace.step(t * 1.0 + duration)
        pace.scheduled(held=False, chunked=False, empty=True)
    assert pace.held_s == pytest.approx(0.03)


def test_sentence_lengths_take_the_window_until_enough_are_seen() -> None:
    lengths = SentenceLengths(48)
    assert lengths.tokens_left(5) == 43
    for n in range(MIN_SENTENCE_SAMPLES):
        lengths.add(10 + n)  # 10..17
    assert lengths.tokens_left(0) <= 17 and lengths.tokens_left(0) >= 16
    assert lengths.tokens_left(15) in (1, 2)  # only 16 and 17 are longer
    assert lengths.tokens_left(30) == 18  # longer than every one seen: the rest of the window
    lengths.add(500)
    assert max(lengths._seen) == 48  # clipped to the window


def test_the_rule_holds_only_when_a_free_step_would_make_the_reply_late() -> None:
    assert at_risk(0.1, 0.6, 10, None, 0.06) and at_risk(0.1, 0.6, 10, 0.02, None)  # not measured yet
    assert not at_risk(0.1, 0.6, 10, 0.02, 0.06)  # 0.1 + 0.06 + 0.2 = 0.36
    assert at_risk(0.4, 0.6, 10, 0.02, 0.06)  # 0.66


def test_the_deadline_needs_a_window_and_is_checked() -> None:
    for bad in (
        {"hold_deadline_s": -0.1},
        {"hold_deadline_s": 61},
        {"hold_deadline_s": 0.5, "window_tokens": 0},
    ):
        with pytest.raises(MakeRoomConfigError):
            MakeRoomConfig.from_additional_config({"make_room": bad})
    assert (
        MakeRoomConfig.from_additional_config({"make_room": {"hold_deadline_s": 0.5}}).hold_deadline_s == 0.5
    )


def simulate(requests: list[SimRequest], **make_room: object) -> tuple[SimResult, SimEngine]:
    kv = 65536
    config = EngineConfig(kv_tokens=kv, max_model_len=fitting_model_len(kv, 16), max_num_batched_tokens=512)
    config = config.with_changes(
        scheduler="make-room",
        additional_config={
            "make_room": {
                "enabled": True,
                "window_tokens": 48,
                "sentence_end_token_ids": [SENTENCE_END_TOKEN],
                **make_room,
            }
        },
    )
    engine = SimEngine(config, load_profile())
    return engine.run(requests), engine


def _workload() -> list[SimRequest]:
    """Agents prefilling long prompts while twelve voice replies (first sentence 12 tokens) arrive one a
    second."""
    agents = [req(f"a{i}", 0.0, 12000, 20, priority=10) for i in range(4)]
    voices = [
        SimRequest(f"v{i}", 1.0 + i, tuple(range(100 + i, 400 + i)), 30, 0, "voice", first_sentence_tokens=12)
        for i in range(12)
    ]
    return [*agents, *voices]


def test_a_reply_ahead_of_a_loose_deadline_lets_agent_prefill_in_and_a_tight_one_holds() -> None:
    held, held_engine = simulate(_workload())
    loose, loose_engine = simulate(_workload(), hold_deadline_s=5.0)
    tight, tight_engine = simulate(_workload(), hold_deadline_s=0.001)
    counts = {
        name: e.scheduler.flatshare_counters()
        for name, e in (("held", held_engine), ("loose", loose_engine), ("tight", tight_engine))
    }
    assert counts["held"]["ahead_releases"] == 0 and counts["tight"]["ahead_releases"] == 0
    assert counts["loose"]["ahead_releases"] > 0
    assert counts["loose"]["hold_steps"] < counts["held"]["hold_steps"]
    assert counts["tight"]["hold_steps"] == counts["held"]["hold_steps"]
    # The agents finish sooner when the replies let them in; every request completes.
    agents_done = {
        name: max(r.finish_s or 0.0 for r in result.records if r.id.startswith("a"))
        for name, result in (("held", held), ("loose", loose))
    }
    assert agents_done["loose"] < agents_done["held"]
    for result in (held, loose, tight):
        assert all(r.finish_s is not None for r in result.records)
    assert by_id(loose)["v0"].first_scheduled_s >= 1.0
