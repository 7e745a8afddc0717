"""The wait ledger: a request's time before its first token split by part, adding up to the measured time."""

from __future__ import annotations

import dataclasses

import pytest
from tests.simkit import req

from flatshare.runfiles.sim_records import RequestRecord
from flatshare.sim.config import EngineConfig, fitting_model_len
from flatshare.sim.engine import SimEngine
from flatshare.sim.profile import load_profile
from flatshare.sim.waits import WAIT_PARTS

pytestmark = pytest.mark.vllm


def _run(requests: list, api_s: float = 0.0, **config: object) -> dict[str, RequestRecord]:
    kv = int(config.get("kv_tokens", EngineConfig.kv_tokens))  # type: ignore[call-overload]
    config.setdefault("max_model_len", fitting_model_len(kv, 16))
    profile = dataclasses.replace(load_profile(), api_latency_s=api_s)
    engine = SimEngine(EngineConfig(**config), profile)  # type: ignore[arg-type]
    return {r.id: r for r in engine.run(requests).records}


def _adds_up(record: RequestRecord) -> None:
    assert set(record.wait_s) == set(WAIT_PARTS)
    assert record.ttft_s is not None
    assert sum(record.wait_s.values()) == pytest.approx(record.ttft_s, abs=1e-9)


def test_a_turn_behind_a_running_prefill_waits_for_token_budget() -> None:
    records = _run([req("long", 0.0, 6000, 4, priority=1), req("turn", 0.01, 100, 4)], api_s=0.05)
    turn = records["turn"]
    _adds_up(turn)
    parts = turn.wait_s
    assert parts["api"] == pytest.approx(0.05)
    # The long prompt takes 12 steps of 512 tokens; the turn waits for the ones after it reached the engine.
    assert parts["token_budget"] > 0.3
    assert parts["kv_memory"] == parts["seats"] == parts["cpu_load"] == 0.0
    assert turn.first_scheduled_s is not None
    assert parts["prefill"] == pytest.approx(turn.token_times_s[0] - turn.first_scheduled_s)


def test_a_turn_behind_agents_that_hold_the_cache_waits_for_kv_memory() -> None:
    # 255 usable blocks; two agents hold ~118 each at 1 s and grow to 122; the turn's 400 tokens need 25.
    agents = [req(f"agent{i}", 0.0, 1850, 100, priority=1) for i in range(2)]
    records = _run([*agents, req("turn", 1.0, 400, 4)], kv_tokens=4096)
    turn = records["turn"]
    _adds_up(turn)
    assert turn.wait_s["kv_memory"] > 0.5
    assert turn.wait_s["token_budget"] == 0.0
    first_agent_done = min(r.finish_s for r in records.values() if r.id.startswith("agent"))  # type: ignore[type-var]
    assert turn.first_scheduled_s is not None and turn.first_scheduled_s >= first_agent_done


def test_a_turn_with_every_seat_taken_waits_for_a_seat() -> None:
    records = _run([req("agent", 0.0, 200, 60, priority=1), req("turn", 0.2, 100, 4)], max_num_seqs=1)
    turn = records["turn"]
    _adds_up(turn)
    assert turn.wait_s["seats"] > 0.5
    assert turn.wait_s["kv_memory"] == turn.wait_s["token_budget"] == 0.0


def test_a_turn_alone_is_its_api_pass_and_its_prefill() -> None:
    records = _run([req("turn", 0.0, 100, 4)], api_s=0.06)
    parts = records["turn"].wait_s
    _adds_up(records["turn"])
    assert parts["api"] == pytest.approx(0.06)
    assert parts["prefill"] > 0
    assert sum(v for k, v in parts.items() if k not in ("api", "prefill")) == 0.0
