"""The ride: held agent prefill rides in make-room's held steps, within a token budget (`ride.py`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from flatshare.scheduler import MakeRoomConfigError
from flatshare.scheduler.config import MakeRoomConfig
from flatshare.scheduler.ride import RideView, choose_riders, ride_allowed
from flatshare.sim.config import EngineConfig
from flatshare.sim.engine import SimEngine, StepReport
from flatshare.sim.profile import load_profile
from flatshare.sim.requests import SimRequest
from simkit import req


@pytest.mark.parametrize(
    ("settings", "key"),
    [
        ({"hold_ride_tokens": -1}, "hold_ride_tokens"),
        ({"hold_ride_tokens": True}, "hold_ride_tokens"),
        ({"hold_ride_tokens": 64.0}, "hold_ride_tokens"),
        ({"hold_ride_tokens": 64, "hold_ride_max_context": -5}, "hold_ride_max_context"),
        ({"hold_ride_max_context": 8192}, "hold_ride_max_context"),
        ({"hold_ride_waiting": True}, "hold_ride_waiting"),
        ({"hold_ride_tokens": 64, "hold_ride_waiting": 1}, "hold_ride_waiting"),
        ({"hint_ride_tokens": -1, "hint_window_s": 1.0}, "hint_ride_tokens"),
        ({"hint_ride_tokens": 64}, "hint_ride_tokens"),  # needs the hints
    ],
)
def test_bad_ride_settings_are_refused(settings: dict[str, object], key: str) -> None:
    with pytest.raises(MakeRoomConfigError, match=key):
        MakeRoomConfig(enabled=True, **settings)  # type: ignore[arg-type]


def test_the_ride_is_off_by_default() -> None:
    config = MakeRoomConfig(enabled=True)
    assert config.hold_ride_tokens == 0 and config.hold_ride_max_context == 0 and config.hint_ride_tokens == 0
    assert MakeRoomConfig(enabled=True, hint_window_s=1.0, hint_ride_tokens=64, hold_ride_waiting=True)


def test_riders_share_the_budget_in_running_order() -> None:
    held = [RideView("a", 10, 100), RideView("b", 500, 100), RideView("c", 500, 100)]
    assert choose_riders(held, 64, 0) == {"a": 10, "b": 54}
    assert choose_riders(held, 0, 0) == {}


def test_a_long_context_does_not_ride_and_a_chunk_stops_at_the_context_limit() -> None:
    held = [RideView("long", 4000, 12000), RideView("near", 4000, 8100), RideView("short", 4000, 1000)]
    assert choose_riders(held, 256, 8192) == {"near": 92, "short": 164}


@pytest.mark.parametrize(
    ("prefilling", "waiting", "others", "allowed"),
    [
        (False, False, 30, True),
        (True, False, 30, False),
        (False, True, 30, False),
        (False, False, 2000, False),
    ],
)
def test_a_step_rides_only_when_no_protected_work_can_lose_tokens(
    prefilling: bool, waiting: bool, others: int, allowed: bool
) -> None:
    assert ride_allowed(prefilling, waiting, others, 64, 2048) is allowed
    assert not ride_allowed(False, False, 0, 0, 2048)


RIDE = 64


def _run(
    tmp_path: Path, prefiller_at: float = 0.5, **settings: object
) -> tuple[list[StepReport], SimEngine, list[dict[str, object]]]:
    trace = tmp_path / f"trace-{len(list(tmp_path.iterdir()))}.jsonl"
    make_room = {"enabled": True, "window_tokens": 48, "trace_path": str(trace), **settings}
    config = EngineConfig(scheduler="make-room", additional_config={"make_room": make_room})
    engine = SimEngine(config, load_profile())
    steps: list[StepReport] = []
    engine.on_step = steps.append
    engine.run(
        [
            req("decoder", 0.0, 300, 400, priority=10),
            req("prefiller", prefiller_at, 30000, 5, priority=10),  # at 0.5: prefilling when the turn arrives
            req("voice", 1.0, 400, 60, priority=0),
        ]
    )
    lines = [json.loads(line) for line in trace.read_text().splitlines()] if trace.exists() else []
    return steps, engine, lines


def _voice_steps(steps: list[StepReport]) -> list[int]:
    """The index of every step that gave the voice a token, counted from its first."""
    indices = [i for i, s in enumerate(steps) if s.scheduled.get("voice")]
    return [i - indices[0] for i in indices]


@pytest.mark.vllm
def test_a_held_step_carries_at_most_the_ride_and_never_delays_the_protected_tokens(tmp_path: Path) -> None:
    held_steps, held_engine, _ = _run(tmp_path)
    steps, engine, trace = _run(tmp_path, hold_ride_tokens=RIDE)
    voice = engine.records["voice"]
    window = [s for s in steps if s.scheduled.get("voice") and s.end_s <= voice.token_times_s[47]]
    decoding = [s for s in window if s.scheduled["voice"] == 1]
    assert decoding and all(s.scheduled.get("prefiller", 0) <= RIDE for s in window)
    assert sum(s.scheduled.get("prefiller", 0) > 0 for s in decoding) > len(decoding) // 2  # it rode
    assert all(not s.scheduled.get("prefiller") for s in window if s.scheduled["voice"] > 1)  # not in prefill
    # The voice gets a token in the same steps, counted from its first, as under the plain hold.
    assert _voice_steps(steps)[:48] == _voice_steps(held_steps)[:48]
    counters = engine.result().scheduler_counters
    assert counters["ride_steps"] > 0 and 0 < counters["ride_tokens"] <= RIDE * counters["ride_steps"]
    assert held_engine.result().scheduler_counters["ride_steps"] == 0
    assert all(r.status == "finished" for r in engine.result().records)
    rides = [line["riders"] for line in trace if "riders" in line]
    assert len(rides) == counters["ride_steps"] and all(sum(r.values()) <= RIDE for r in rides)


@pytest.mark.vllm
def test_a_context_past_the_limit_never_rides(tmp_path: Path) -> None:
    steps, engine, _ = _run(tmp_path, hold_ride_tokens=RIDE, hold_ride_max_context=2000)
    voice = engine.records["voice"]
    window = [s for s in steps if s.scheduled.get("voice") and s.end_s <= voice.token_times_s[47]]
    assert window and not any(s.scheduled.get("prefiller") for s in window)  # its context is far past 2,000
    assert engine.result().scheduler_counters["ride_steps"] == 0


@pytest.mark.vllm
def test_with_hold_ride_waiting_a_held_waiting_request_is_admitted_with_a_chunk_of_the_ride(
    tmp_path: Path,
) -> None:
    def window_prefill(**settings: object) -> list[int]:
        steps, engine, _ = _run(
            tmp_path, prefiller_at=1.2, hold_ride_tokens=RIDE, **settings
        )  # after the turn
        voice = engine.records["voice"]
        end = voice.token_times_s[47]
        return [s.scheduled.get("prefiller", 0) for s in steps if s.scheduled.get("voice") and s.end_s <= end]

    assert not any(window_prefill())  # waiting: held without `hold_ride_waiting`
    riding = window_prefill(hold_ride_waiting=True)
    assert any(riding) and max(riding) <= RIDE


@pytest.mark.vllm
def test_the_ride_before_the_turn_rides_only_in_a_hints_hold_and_ends_before_its_turn_is_due() -> None:
    """Asynchronous steps; an agent prefills a long prompt beside a decoder. A turn at 1.0 s (its hint at
    0.6 s says 0.4 s) and a second caller's at 1.9 s (hinted at 1.4 s, due in 0.5 s: its hold starts while
    the first turn's window is still open). With `hint_ride_tokens` the steps held for the second hint
    alone carry `RIDE` tokens of the agent's prefill, each ending before that turn is due; no window step
    of either turn carries any, and the second turn finds a held step in flight as without the ride."""

    def hint(name: str, at: float, due_in_s: float) -> SimRequest:
        extra = {"flatshare_hint": "turn", "flatshare_hint_in_s": due_in_s}
        return SimRequest(name, at, (11, 12, 13), 1, 0, "hint", extra_args=extra)

    def run(**settings: object) -> tuple[list[StepReport], SimEngine]:
        make_room = {"enabled": True, "window_tokens": 48, "hint_window_s": 1.0, **settings}
        config = EngineConfig(
            scheduler="make-room", additional_config={"make_room": make_room}, async_scheduling=True
        )
        engine = SimEngine(config, load_profile())
        steps: list[StepReport] = []
        engine.on_step = steps.append
        agents = [req("decoder", 0.0, 300, 400, priority=10), req("prefiller", 0.0, 30000, 5, priority=10)]
        turns = [req("voice", 1.0, 400, 60, priority=0), req("voice2", 1.9, 400, 60, priority=0)]
        engine.run([*agents, hint("hint1", 0.6, 0.4), hint("hint2", 1.4, 0.5), *turns])
        return steps, engine

    def window_prefill(steps: list[StepReport], engine: SimEngine) -> list[int]:
        ends = {v: engine.records[v].token_times_s[47] for v in ("voice", "voice2")}
        return [
            s.scheduled.get("prefiller", 0)
            for s in steps
            if any(s.scheduled.get(v) and s.end_s <= end for v, end in ends.items())
        ]

    held_steps, held_engine = run()
    steps, engine = run(hint_ride_tokens=RIDE)
    rides = [s for s in steps if s.scheduled.get("prefiller") == RIDE]
    assert rides and all(s.start_s > 1.5 and s.end_s <= 2.0 for s in rides)
    assert engine.result().scheduler_counters["ride_steps"] == len(rides)
    assert held_engine.result().scheduler_counters["ride_steps"] == 0
    assert not any(window_prefill(held_steps, held_engine)) and not any(window_prefill(steps, engine))
    # The turn finds a held step in flight, as without the ride: it starts at most one held step later (the
    # steps' phase against its arrival moves).
    start, held_start = (
        engine.records["voice2"].first_scheduled_s,
        held_engine.records["voice2"].first_scheduled_s,
    )
    held_step = min(s.end_s - s.start_s for s in held_steps if s.scheduled.get("decoder") == 1)
    assert start is not None and held_start is not None and start <= held_start + held_step
    assert all(r.status == "finished" for r in engine.result().records)
