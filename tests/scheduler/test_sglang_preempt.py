"""sglang-preempt (SGLang's priority preemption) in-process on vLLM's real scheduler, in the simulated engine."""

from __future__ import annotations

import dataclasses
import random

import pytest

from flatshare.scheduler import SglangPreemptConfigError
from flatshare.scheduler.policy import RunningView, WaitingNeed
from flatshare.scheduler.sglang_policy import choose, eligible
from flatshare.sim.config import EngineConfig
from flatshare.sim.engine import SimEngine
from flatshare.sim.profile import load_profile
from flatshare.sim.requests import SimRequest
from simkit import by_id, req, run

pytestmark = pytest.mark.vllm

FULL_KV = 32400  # two 16k-token agent contexts fill it (as in test_make_room.py)


def sglang(**settings: object) -> dict[str, object]:
    return {
        "scheduler": "sglang-preempt",
        "additional_config": {"sglang_preempt": {"enabled": True, **settings}},
    }


def agents_and_voice() -> list[SimRequest]:
    agents = [req(f"agent{i}", 0.0, 16000, 1500, priority=10) for i in range(2)]
    return [*agents, req("voice", 8.0, 600, 40, priority=0)]


# -- the rule, as pure functions ---------------------------------------------------------------------
def _view(rid: str, priority: int, arrival: float, blocks: range) -> RunningView:
    return RunningView(rid, priority, arrival, tuple(blocks))


def _need(blocks: int, free: int = 0, seats: int = 4) -> WaitingNeed:
    return WaitingNeed(blocks, frozenset(), 0, free, seats, token_budget=1)


def test_only_a_priority_worse_by_more_than_the_threshold_is_eligible() -> None:
    assert eligible(11, 0, 10) and not eligible(10, 0, 10)  # SGLang: priority_diff > threshold
    assert eligible(1, 0, 0) and not eligible(0, 0, 0)


def test_victims_are_taken_worst_first_and_latest_first_until_it_fits() -> None:
    running = [
        _view("a", 20, 1.0, range(0, 4)),
        _view("b", 20, 2.0, range(4, 8)),
        _view("c", 15, 0.0, range(8, 12)),
    ]
    refs = {b: 1 for b in range(12)}
    assert choose(_need(4), running, 0, 10, refs).victims == ("b",)  # same priority: the later arrival
    assert choose(_need(8), running, 0, 10, refs).victims == ("b", "a")
    assert choose(_need(12), running, 0, 10, refs).victims == ("b", "a", "c")  # no cap on victims


def test_it_stops_at_the_first_running_request_within_the_threshold() -> None:
    running = [_view("far", 20, 0.0, range(0, 4)), _view("near", 5, 0.0, range(4, 8))]
    refs = {b: 1 for b in range(8)}
    choice = choose(_need(8), running, 0, 10, refs)
    assert choice.victims == () and choice.declined and not choice.fits
    within = choose(_need(4), [running[1]], 0, 10, refs)
    assert within.victims == () and within.within_threshold and not within.declined


def test_the_token_budget_alone_never_triggers_it() -> None:
    # Blocks and seats are free; the running requests take the whole (1-token) budget: SGLang's trigger is
    # a full batch (memory or seats), so nothing is preempted.
    running = [RunningView("a", 20, 0.0, (0,), step_tokens=5)]
    choice = choose(_need(1, free=10), running, 0, 0, {0: 1})
    assert choice.fits and choice.victims == ()
    # as vLLM's view counts a step (`vllm_view.waiting_need`): the input budget is max_num_batched_tokens
    # too, and the running requests take all of it
    need = dataclasses.replace(_need(1, free=10), token_budget=512, input_budget=512)
    choice = choose(need, [RunningView("a", 20, 0.0, (0,), step_tokens=512)], 0, 0, {0: 1})
    assert choice.fits and choice.victims == ()


def test_a_full_set_of_seats_takes_one_victim() -> None:
    running = [_view("a", 20, 0.0, range(0, 2)), _view("b", 20, 1.0, range(2, 4))]
    choice = choose(_need(1, free=10, seats=0), running, 0, 10, {b: 1 for b in range(4)})
    assert choice.victims == ("b",) and choice.for_seats


# -- on vLLM's scheduler -------------------------------------------------------------------------------
def test_a_voice_turn_preempts_agents_worse_by_more_than_the_threshold() -> None:
    stock = by_id(run(agents_and_voice(), kv_tokens=FULL_KV))["voice"]
    result = run(agents_and_voice(), kv_tokens=FULL_KV, **sglang(threshold=5))
    voice = by_id(result)["voice"]
    assert stock.first_scheduled_s - stock.arrival_s > 1.0  # type: ignore[attr-defined]
    assert voice.first_scheduled_s - voice.arrival_s < 0.1  # type: ignore[attr-defined]
    counters = result.scheduler_counters
    assert counters["preemption_events"] >= 1 and counters["preempted_requests"] >= 1
    assert counters["acted_not_admitted"] == 0


def test_a_gap_equal_to_the_threshold_preempts_nothing() -> None:
    # Voice 0, agents 10: SGLang's default threshold (10) never lets the turn preempt them.
    stock = by_id(run(agents_and_voice(), kv_tokens=FULL_KV))["voice"]
    result = run(agents_and_voice(), kv_tokens=FULL_KV, **sglang())
    counters = result.scheduler_counters
    assert counters["preempted_requests"] == 0
    assert counters["within_threshold"] > 0  # it was blocked, and the threshold is why
    assert by_id(result)["voice"].ttft_s == pytest.approx(stock.ttft_s)  # type: ignore[attr-defined]


def test_it_takes_as_many_victims_as_the_request_needs() -> None:
    # Five ~3k-token agents fill the cache; a 12k-token request needs more than two of them (make-room,
    # at max_victims 2, declines here: test_make_room.py). SGLang has no cap.
    agents = [req(f"agent{i}", 0.0, 3000, 3000, priority=10) for i in range(5)]
    requests = [*agents, req("voice", 10.0, 12000, 10, priority=0)]
    stock = by_id(run(requests, kv_tokens=16400))["voice"]
    result = run(requests, kv_tokens=16400, **sglang(threshold=0))
    assert result.scheduler_counters["preempted_requests"] >= 3
    voice = by_id(result)["voice"]
    assert voice.first_scheduled_s - voice.arrival_s < 0.1  # type: ignore[attr-defined]
    assert voice.ttft_s < stock.ttft_s  # type: ignore[attr-defined]


def test_a_full_set_of_seats_is_preempted_for() -> None:
    requests = [req("a", 0.0, 300, 400, priority=10), req("b", 0.0, 300, 400, priority=10)]
    requests.append(req("h", 1.0, 200, 20, priority=0))
    result = run(requests, kv_tokens=40960, max_num_seqs=2, **sglang(threshold=0))
    assert result.scheduler_counters["preemptions_for_seats"] == 1
    assert by_id(result)["h"].first_scheduled_s - 1.0 < 0.1  # type: ignore[attr-defined]


def test_every_preempted_request_completes_with_all_its_tokens() -> None:
    rng = random.Random(7)
    requests = [
        req(f"r{i}", rng.uniform(0, 20), rng.randint(500, 4000), rng.randint(5, 200), rng.choice([0, 5, 10]))
        for i in range(40)
    ]
    result = run(requests, kv_tokens=12000, **sglang(threshold=0))
    assert result.scheduler_counters["preempted_requests"] > 0
    for record in result.records:
        assert record.status == "finished"
        assert len(record.token_times_s) == record.max_tokens


def _decisions(scheduler: str, **more: object) -> list[tuple[dict[str, int], list[str]]]:
    rng = random.Random(2026)
    requests = [
        req(f"r{i}", rng.uniform(0, 30), rng.randint(64, 5000), rng.randint(1, 200), rng.choice([0, 5, 10]))
        for i in range(50)
    ]
    config = EngineConfig(kv_tokens=10000, max_model_len=8192, max_num_seqs=16, scheduler=scheduler, **more)  # type: ignore[arg-type]
    engine = SimEngine(config, load_profile())
    steps: list[tuple[dict[str, int], list[str]]] = []
    engine.on_step = lambda s: steps.append((s.scheduled, s.preempted))
    engine.run(requests)
    return steps


def test_disabled_or_under_fcfs_it_decides_exactly_as_vllm() -> None:
    stock = _decisions("vllm")
    assert len(stock) > 500
    assert _decisions("sglang-preempt") == stock  # not enabled
    enabled = {"sglang_preempt": {"enabled": True, "threshold": 0}}
    fcfs = _decisions("vllm", policy="fcfs")
    assert _decisions("sglang-preempt", policy="fcfs", additional_config=enabled) == fcfs


def test_invalid_settings_fail_at_start_up() -> None:
    with pytest.raises(SglangPreemptConfigError, match="threshold"):
        SimEngine(EngineConfig(**sglang(threshold=-1)), load_profile())  # type: ignore[arg-type]
    with pytest.raises(SglangPreemptConfigError, match=r"unknown key\(s\) \['max_victims'\]"):
        SimEngine(EngineConfig(**sglang(max_victims=2)), load_profile())  # type: ignore[arg-type]


def test_async_sglang_preempt_makes_room_for_the_voice_turn() -> None:
    stock = by_id(run(agents_and_voice(), kv_tokens=FULL_KV, async_scheduling=True))["voice"]
    result = run(agents_and_voice(), kv_tokens=FULL_KV, async_scheduling=True, **sglang(threshold=5))
    assert result.scheduler_counters["preempted_requests"] >= 1
    assert by_id(result)["voice"].ttft_s < stock.ttft_s / 5  # type: ignore[attr-defined]
