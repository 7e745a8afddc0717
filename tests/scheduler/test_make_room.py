"""make-room in-process on vLLM's real scheduler, driven by the simulated engine."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from flatshare.scheduler import MakeRoomConfigError
from flatshare.sim.config import EngineConfig
from flatshare.sim.engine import SimEngine, StepReport
from flatshare.sim.profile import load_profile
from flatshare.sim.requests import SimRequest
from simkit import by_id, req, run

pytestmark = pytest.mark.vllm

FULL_KV = 32400  # two 16k-token agent contexts fill it (see tests/sim/test_engine.py)


def make_room(**settings: object) -> dict[str, object]:
    return {"scheduler": "make-room", "additional_config": {"make_room": {"enabled": True, **settings}}}


def agents_and_voice(voice_priority: int = 0) -> list[SimRequest]:
    agents = [req(f"agent{i}", 0.0, 16000, 1500, priority=10) for i in range(2)]
    return [*agents, req("voice", 8.0, 600, 40, priority=voice_priority)]


def test_a_waiting_voice_turn_takes_memory_in_the_next_step() -> None:
    stock = by_id(run(agents_and_voice(), kv_tokens=FULL_KV))["voice"]
    result = run(agents_and_voice(), kv_tokens=FULL_KV, **make_room())
    voice = by_id(result)["voice"]
    assert stock.first_scheduled_s - stock.arrival_s > 1.0  # type: ignore[attr-defined]
    assert voice.first_scheduled_s - voice.arrival_s < 0.1  # type: ignore[attr-defined]
    assert 1 <= result.scheduler_counters["preemptions_for_waiting"] <= 2
    assert voice.ttft_s < stock.ttft_s / 5  # type: ignore[attr-defined]


def test_nothing_is_preempted_when_two_victims_would_not_free_enough(tmp_path: Path) -> None:
    # Five agents of ~3k tokens fill the cache; a 12k-token request needs more than two of them hold.
    trace = tmp_path / "trace.jsonl"
    agents = [req(f"agent{i}", 0.0, 3000, 3000, priority=10) for i in range(5)]
    voice = req("voice", 10.0, 12000, 10, priority=0)
    result = run([*agents, voice], kv_tokens=16400, **make_room(trace_path=str(trace)))
    assert result.scheduler_counters["declined_insufficient_victims"] > 0
    decisions = [json.loads(line) for line in trace.read_text().splitlines()]
    first = next(d for d in decisions if d.get("waiting") == "voice")
    assert first["declined"] and "victims" not in first
    assert first["needed_blocks"] > first["free_blocks"]


def test_equal_priorities_preempt_nothing() -> None:
    result = run(agents_and_voice(voice_priority=10), kv_tokens=FULL_KV, **make_room())
    assert result.scheduler_counters["preemptions_for_waiting"] == 0
    assert result.scheduler_counters["declined_insufficient_victims"] == 0


def _window_run(**settings: object) -> tuple[list[StepReport], SimEngine]:
    engine = SimEngine(EngineConfig(**make_room(**settings)), load_profile())  # type: ignore[arg-type]
    steps: list[StepReport] = []
    engine.on_step = steps.append
    engine.run(
        [
            req("decoder", 0.0, 300, 400, priority=10),
            req("voice", 1.0, 400, 60, priority=0),
            req("prefiller", 1.0, 8000, 5, priority=10),
        ]
    )
    return steps, engine


def _voice_outputs_before(steps: list[StepReport], step: StepReport) -> int:
    return sum(1 for s in steps if s.end_s <= step.start_s and "voice" in s.scheduled and s.tokens)


@pytest.mark.parametrize("hold_decode", [False, True])
def test_inside_the_window_no_lower_priority_prefill(hold_decode: bool) -> None:
    steps, engine = _window_run(window_tokens=48, hold_decode=hold_decode)
    voice = engine.records["voice"]
    window_end = voice.token_times_s[47]
    in_window = [
        s for s in steps if voice.arrival_s <= s.start_s and s.end_s <= window_end and "voice" in s.scheduled
    ]
    assert in_window
    assert all("prefiller" not in s.scheduled for s in in_window)
    decoder_steps = sum("decoder" in s.scheduled for s in in_window)
    if hold_decode:
        assert decoder_steps == 0
    else:
        assert decoder_steps == len(in_window)
    counters = engine.result().scheduler_counters
    assert counters["hold_steps"] >= len(in_window)
    assert (counters["held_decode_tokens"] > 0) == hold_decode


def test_after_t_tokens_lower_priority_prefill_resumes() -> None:
    steps, engine = _window_run(window_tokens=16)
    voice = engine.records["voice"]
    after = [s for s in steps if s.start_s >= voice.token_times_s[15] and s.end_s <= (voice.finish_s or 0)]
    assert any("prefiller" in s.scheduled for s in after)


def test_every_preempted_request_completes_with_all_its_tokens() -> None:
    rng = random.Random(7)
    requests = [
        req(
            f"r{i}",
            rng.uniform(0, 20),
            rng.randint(500, 4000),
            rng.randint(5, 200),
            priority=rng.choice([0, 5, 10]),
        )
        for i in range(40)
    ]
    result = run(requests, kv_tokens=12000, **make_room(window_tokens=16))
    assert result.scheduler_counters["preemptions_for_waiting"] > 0
    for record in result.records:
        assert record.status == "finished"
        assert len(record.token_times_s) == record.max_tokens


def test_disabled_make_room_decides_exactly_as_vllm() -> None:
    rng = random.Random(2026)
    requests = [
        req(
            f"r{i}",
            rng.uniform(0, 60),
            rng.randint(64, 6000),
            rng.randint(1, 300),
            priority=rng.choice([0, 1, 5, 10]),
            group=rng.choice([None, "g1", "g2"]),
        )
        for i in range(120)
    ]
    decisions = []
    for scheduler in ("vllm", "make-room"):
        config = EngineConfig(kv_tokens=10000, max_model_len=8192, max_num_seqs=16, scheduler=scheduler)
        engine = SimEngine(config, load_profile())
        steps: list[tuple[dict[str, int], list[str]]] = []
        engine.on_step = lambda s, steps=steps: steps.append((s.scheduled, s.preempted))
        engine.run(requests)
        decisions.append(steps)
    assert len(decisions[0]) > 2000
    assert decisions[0] == decisions[1]


def test_invalid_config_fails_at_start_up() -> None:
    with pytest.raises(MakeRoomConfigError, match="max_victims"):
        SimEngine(EngineConfig(**make_room(max_victims=0)), load_profile())  # type: ignore[arg-type]


def test_per_step_trace_shows_the_preemption(tmp_path: Path) -> None:
    trace = tmp_path / "trace.jsonl"
    run(agents_and_voice(), kv_tokens=FULL_KV, **make_room(trace_path=str(trace)))
    lines = [json.loads(line) for line in trace.read_text().splitlines()]
    made_room = [line for line in lines if line.get("victims")]
    assert made_room and made_room[0]["waiting"] == "voice"
    assert any("held_running" in line for line in lines)
