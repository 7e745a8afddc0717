"""Protected KV from the CPU tier (`flatshare_protected`): a protected request's hit loaded inside the step
that admits it, and a tier that keeps protected blocks through a burst of other stores."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from flatshare.errors import InputError
from flatshare.runfiles.sim_records import RequestRecord
from flatshare.sim.config import EngineConfig, fitting_model_len
from flatshare.sim.cpu_tier import CpuKvTier
from flatshare.sim.engine import SimEngine, SimResult, StepReport
from flatshare.sim.profile import ScheduledWork, load_profile
from flatshare.sim.requests import SimRequest
from simkit import req

pytestmark = pytest.mark.vllm

SYNC = {"flatshare_protected": {"sync_load": True}}
KEEP = {"flatshare_protected": {"keep_in_tier": True}}


def _run(requests: list[SimRequest], **config: Any) -> tuple[SimResult, list[StepReport]]:
    kv = int(config.get("kv_tokens", EngineConfig.kv_tokens))
    config.setdefault("max_model_len", fitting_model_len(kv, 16))
    engine = SimEngine(EngineConfig(**config), load_profile())
    steps: list[StepReport] = []
    engine.on_step = steps.append
    return engine.run(requests), steps


def _records(result: SimResult) -> dict[str, RequestRecord]:
    return {r.id: r for r in result.records}


def _calls(priority: int) -> list[SimRequest]:
    """A call whose 16,000-token context comes back from the CPU tier while a decoder keeps stepping."""
    return [
        req("call1", 0.0, 16000, 2, priority=priority, group="s"),
        req("decoder", 9.0, 300, 200, priority=1),
        req("call2", 10.0, 16100, 2, priority=priority, group="s"),
    ]


@pytest.mark.parametrize("async_scheduling", [False, True])
def test_a_protected_hit_loads_within_the_step_that_admits_it(async_scheduling: bool) -> None:
    """Asynchronously the load starts after the admitting step, is seen at the next launch and the request
    runs a step later; synchronously the admitting step loads it before its forward and samples the first
    token: steps sooner, and the load is the call's only wait besides that step."""
    profile = load_profile()
    config = {"cpu_tier_tokens": 65536, "enable_prefix_caching": False, "async_scheduling": async_scheduling}
    stock, _ = _run(_calls(0), **config)
    sync, steps = _run(_calls(0), **config, cpu_tier_connector=SYNC)
    load_s = profile.load_time(16000)
    before, after = _records(stock)["call2"], _records(sync)["call2"]
    assert before.ttft_s is not None and after.ttft_s is not None
    decode_s = profile.step_time([ScheduledWork(1, 300, True)])
    assert after.ttft_s < before.ttft_s - 2 * decode_s
    loading = [s for s in steps if s.sync_loaded == ("call2",)]
    assert len(loading) == 1 and loading[0].sync_load_s == pytest.approx(load_s)
    assert loading[0].scheduled["call2"] == 100  # the rest of the prompt, in the same step
    assert after.wait_s["cpu_load"] == pytest.approx(load_s)
    assert sync.cpu_tier["sync_loads"] == 1 and sync.cpu_tier["sync_loaded_tokens"] == 16000
    assert sync.cpu_tier["sync_load_wait_s"] == pytest.approx(load_s)
    assert stock.cpu_tier["sync_loads"] == 0


def test_a_hit_of_the_whole_prompt_stops_one_token_short() -> None:
    """vLLM computes at least one token of a request it schedules: a block-aligned prompt wholly in the
    tier loads all but its last block and computes that."""
    calls = [req("call1", 0.0, 4096, 2, group="s"), req("call2", 5.0, 4096, 2, group="s")]
    result, steps = _run(calls, cpu_tier_tokens=65536, enable_prefix_caching=False, cpu_tier_connector=SYNC)
    loading = [s for s in steps if s.sync_loaded == ("call2",)]
    assert len(loading) == 1 and loading[0].scheduled["call2"] == 16
    assert result.cpu_tier["sync_loaded_tokens"] == 4096 - 16


def test_unprotected_requests_load_as_before() -> None:
    config = {"cpu_tier_tokens": 65536, "enable_prefix_caching": False, "async_scheduling": True}
    stock, _ = _run(_calls(2), **config)
    sync, _ = _run(_calls(2), **config, cpu_tier_connector={"flatshare_protected": {"sync_load": True}})
    assert sync.cpu_tier["sync_loads"] == 0 and sync.cpu_tier["loads"] == 1
    assert [dataclasses.asdict(r) for r in sync.records] == [dataclasses.asdict(r) for r in stock.records]


def test_the_settings_off_change_nothing() -> None:
    config = {"cpu_tier_tokens": 65536, "enable_prefix_caching": False}
    stock, _ = _run(_calls(0), **config)
    off, _ = _run(_calls(0), **config, cpu_tier_connector={"flatshare_protected": {}})
    assert [dataclasses.asdict(r) for r in off.records] == [dataclasses.asdict(r) for r in stock.records]
    assert "cpu_tier_connector" not in EngineConfig(cpu_tier_tokens=65536).to_json()


def _burst() -> list[SimRequest]:
    """A voice prompt stored in a 4,096-token tier, then agents storing 10,000 tokens, then the voice
    turn again (the GPU keeps nothing: prefix caching off)."""
    agents = [req(f"agent{i}", 1.0 + i, 2000, 1, priority=10) for i in range(5)]
    return [req("voice1", 0.0, 2000, 1, group="v"), *agents, req("voice2", 8.0, 2100, 1, group="v")]


def test_the_tier_keeps_the_protected_prefix_through_a_burst() -> None:
    config = {"cpu_tier_tokens": 4096, "enable_prefix_caching": False}
    lru, _ = _run(_burst(), **config)
    kept, _ = _run(_burst(), **config, cpu_tier_connector=KEEP)
    assert lru.cpu_loaded_tokens == 0, "under LRU the agents' stores evicted the voice prompt"
    assert kept.cpu_loaded_tokens == 2000 - 2000 % 16
    assert kept.cpu_tier["evicted_blocks"] > 0 and kept.cpu_tier["kept_evicted_blocks"] == 0
    before, after = _records(lru)["voice2"], _records(kept)["voice2"]
    assert after.ttft_s is not None and before.ttft_s is not None and after.ttft_s < before.ttft_s


def test_kept_blocks_go_last_and_past_their_cap_as_ordinary_ones() -> None:
    tier = CpuKvTier(4, max_kept_blocks=2)
    for key in ("k1", "k2", "k3", "o1"):
        tier.prepare_store([key])
        tier.complete_store([key])
    tier.keep(["k1", "k2", "k3"])  # one past the cap: k1, the least recently used, counts as ordinary
    assert tier.prepare_store(["n1"]) == ["n1"]
    assert "k1" not in tier and {"k2", "k3", "o1"} <= set(tier._blocks)
    tier.complete_store(["n1"])
    assert tier.prepare_store(["n2"]) == ["n2"] and "o1" not in tier
    assert tier.counters.kept_spared_blocks >= 1
    tier.complete_store(["n2"])
    # Kept ones go when nothing else can: n1 and n2, then k2.
    assert tier.prepare_store(["n3", "n4", "n5"]) == ["n3", "n4", "n5"]
    assert set(tier._blocks) == {"k3", "n3", "n4", "n5"}
    assert tier.counters.kept_evicted_blocks == 2 and tier.kept_blocks == 1  # k1 (past the cap) and k2


def test_a_plain_tier_is_least_recently_used_first() -> None:
    tier = CpuKvTier(2)
    tier.keep(["a"])  # no-op without a cap
    for key in ("a", "b"):
        tier.prepare_store([key])
        tier.complete_store([key])
    tier.keep(["a"])
    assert tier.prepare_store(["c"]) == ["c"] and "a" not in tier


@pytest.mark.parametrize(
    ("settings", "words"),
    [
        ({"flatshare_protected": {"sync": True}}, "unknown key(s) ['sync']"),
        ({"flatshare_protected": {"sync_load": 1}}, "sync_load must be true or false"),
        (
            {"flatshare_protected": {"sync_load_preempted": "yes"}},
            "sync_load_preempted must be true or false",
        ),
        ({"flatshare_protected": {"max_kept_share": 0}}, "max_kept_share must be in (0, 1]"),
        ({"other": {}}, "unknown key(s) ['other']"),
    ],
)
def test_bad_settings_are_refused(settings: dict[str, Any], words: str) -> None:
    with pytest.raises(InputError, match=words.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")):
        EngineConfig(cpu_tier_tokens=65536, cpu_tier_connector=settings)


def test_the_settings_need_the_tier() -> None:
    with pytest.raises(InputError, match="needs the CPU tier"):
        EngineConfig(cpu_tier_connector=SYNC)
