"""reserve (KV kept free for top-priority requests) in-process on vLLM's real scheduler, in the simulated
engine."""

from __future__ import annotations

import random

import pytest

from flatshare.scheduler import ReserveConfigError
from flatshare.scheduler.reserve import reserve_blocks
from flatshare.sim.config import EngineConfig
from flatshare.sim.engine import SimEngine
from flatshare.sim.profile import load_profile
from flatshare.sim.requests import SimRequest
from simkit import by_id, req, run

pytestmark = pytest.mark.vllm

FULL_KV = 32400  # two 16k-token agent contexts fill it (as in test_make_room.py)


def reserve(**settings: object) -> dict[str, object]:
    return {"scheduler": "reserve", "additional_config": {"reserve": {"enabled": True, **settings}}}


def test_reserve_tokens_round_up_to_whole_blocks() -> None:
    assert reserve_blocks(0, 16) == 0 and reserve_blocks(1, 16) == 1 and reserve_blocks(4096, 16) == 256


def test_the_reserve_keeps_a_voice_turn_fast_while_agents_fill_the_cache() -> None:
    agents = [req(f"agent{i}", 0.0, 16000, 1500, priority=10) for i in range(2)]
    requests = [*agents, req("voice", 8.0, 600, 40, priority=0)]
    stock = by_id(run(requests, kv_tokens=FULL_KV))["voice"]
    result = run(requests, kv_tokens=FULL_KV, **reserve(reserve_tokens=2048))
    voice = by_id(result)["voice"]
    assert stock.first_scheduled_s - stock.arrival_s > 1.0  # type: ignore[attr-defined]
    assert voice.first_scheduled_s - voice.arrival_s < 0.1  # type: ignore[attr-defined]
    assert voice.ttft_s < stock.ttft_s / 5  # type: ignore[attr-defined]
    assert result.scheduler_counters["refused_admissions"] > 0  # the second agent waited for the reserve


def test_growing_agents_are_preempted_at_the_reserve_and_a_turn_takes_it() -> None:
    # Two agents fit together when admitted but not once they have decoded: each needs a block the
    # reserve holds, vLLM preempts one. A turn arriving while both run is admitted into the reserve.
    agents = [req(f"agent{i}", 0.0, 2500, 1500, priority=10) for i in range(2)]
    requests = [*agents, req("voice", 5.0, 1800, 20, priority=0)]
    stock = run(requests, kv_tokens=8192)
    result = run(requests, kv_tokens=8192, **reserve(reserve_tokens=2048))
    counters = result.scheduler_counters
    assert counters["refused_growth"] > 0 and result.preemptions > stock.preemptions
    assert counters["protected_allocations_into_reserve"] >= 1
    voice = by_id(result)["voice"]
    assert voice.first_scheduled_s - voice.arrival_s < 0.1  # type: ignore[attr-defined]
    for record in result.records:
        assert record.status == "finished" and len(record.token_times_s) == record.max_tokens


def test_a_request_larger_than_the_pool_less_the_reserve_is_exempt() -> None:
    requests = [req("big", 0.0, 3000, 50, priority=10)]
    result = run(requests, kv_tokens=4096, **reserve(reserve_tokens=2048))
    assert result.scheduler_counters["exempt_requests"] == 1
    assert by_id(result)["big"].status == "finished"  # type: ignore[attr-defined]


def test_every_request_completes_with_all_its_tokens() -> None:
    rng = random.Random(7)
    requests = [
        req(f"r{i}", rng.uniform(0, 20), rng.randint(500, 4000), rng.randint(5, 200), rng.choice([0, 5, 10]))
        for i in range(40)
    ]
    result = run(requests, kv_tokens=12000, **reserve(reserve_tokens=2048))
    counters = result.scheduler_counters
    assert counters["refused_admissions"] + counters["refused_growth"] > 0
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


def test_disabled_under_fcfs_or_with_no_reserve_it_decides_exactly_as_vllm() -> None:
    stock = _decisions("vllm")
    assert len(stock) > 500
    assert _decisions("reserve") == stock  # not enabled
    assert (
        _decisions("reserve", additional_config={"reserve": {"enabled": True, "reserve_tokens": 0}}) == stock
    )
    fcfs = _decisions("vllm", policy="fcfs")
    enabled = {"reserve": {"enabled": True, "reserve_tokens": 2048}}
    assert _decisions("reserve", policy="fcfs", additional_config=enabled) == fcfs


def test_invalid_settings_fail_at_start_up() -> None:
    with pytest.raises(ReserveConfigError, match="reserve_tokens"):
        SimEngine(EngineConfig(**reserve(reserve_tokens=-1)), load_profile())  # type: ignore[arg-type]
    with pytest.raises(ReserveConfigError, match="nothing else could run"):
        SimEngine(
            EngineConfig(kv_tokens=4096, max_model_len=2048, **reserve(reserve_tokens=4096)), load_profile()
        )  # type: ignore[arg-type]
    with pytest.raises(ReserveConfigError, match=r"unknown key\(s\) \['blocks'\]"):
        SimEngine(EngineConfig(**reserve(blocks=4)), load_profile())  # type: ignore[arg-type]


def test_async_reserve_keeps_the_voice_turn_fast() -> None:
    agents = [req(f"agent{i}", 0.0, 16000, 1500, priority=10) for i in range(2)]
    requests: list[SimRequest] = [*agents, req("voice", 8.0, 600, 40, priority=0)]
    stock = by_id(run(requests, kv_tokens=FULL_KV, async_scheduling=True))["voice"]
    result = run(requests, kv_tokens=FULL_KV, async_scheduling=True, **reserve(reserve_tokens=2048))
    assert result.scheduler_counters["refused_admissions"] > 0
    assert by_id(result)["voice"].ttft_s < stock.ttft_s / 5  # type: ignore[attr-defined]
