"""Preempted requests held in the CPU tier until they come back (`flatshare_protected.keep_preempted`): a
victim whose blocks a burst of other stores would push out loads them back instead of recomputing them."""

from __future__ import annotations

from typing import Any

import pytest

from flatshare.errors import InputError
from flatshare.sim.config import EngineConfig, fitting_model_len
from flatshare.sim.cpu_tier import CpuKvTier
from flatshare.sim.engine import SimEngine
from flatshare.sim.profile import load_profile
from flatshare.sim.requests import SimRequest
from simkit import req, run

pytestmark = pytest.mark.vllm

HOLD = {"flatshare_protected": {"keep_preempted": True}}
HOLD_SYNC = {"flatshare_protected": {"keep_preempted": True, "sync_load_preempted": True}}
MAKE_ROOM = {"make_room": {"enabled": True, "window_tokens": 0}}


def _stored(tier: CpuKvTier, *keys: str) -> None:
    for key in keys:
        tier.prepare_store([key])
        tier.complete_store([key])


def test_held_blocks_go_after_ordinary_ones_until_released() -> None:
    tier = CpuKvTier(4, max_kept_blocks=4)
    _stored(tier, "v1", "v2", "o1", "o2")
    assert tier.hold("victim", ["v1", "v2", "gone"]) == 2  # only what the tier has
    assert tier.held_owners == 1 and tier.kept_blocks == 2
    assert tier.prepare_store(["n1", "n2"]) == ["n1", "n2"]
    assert set(tier._blocks) == {"v1", "v2", "n1", "n2"}, "the ordinary blocks went first"
    tier.release("victim")
    assert tier.held_owners == 0 and tier.kept_blocks == 0
    tier.complete_store(["n1", "n2"])
    # Held, v1 became the most recent of the two: released, the victim's tail (v2) goes first.
    assert tier.prepare_store(["n3"]) == ["n3"] and "v2" not in tier and "v1" in tier


def test_a_block_two_victims_hold_stays_held_until_both_are_back() -> None:
    tier = CpuKvTier(3, max_kept_blocks=3)
    _stored(tier, "shared", "a", "o1")
    tier.hold("one", ["shared", "a"])
    tier.hold("two", ["shared"])
    tier.release("one")
    assert tier.kept_blocks == 1
    assert tier.prepare_store(["n1", "n2"]) == ["n1", "n2"]
    assert "shared" in tier and "a" not in tier
    tier.release("two")
    tier.release("two")  # twice: nothing more
    assert tier.kept_blocks == 0


def test_held_blocks_past_the_cap_count_as_ordinary_and_an_evicted_hold_is_counted() -> None:
    tier = CpuKvTier(3, max_kept_blocks=1)
    _stored(tier, "v1", "v2", "o1")
    tier.hold("victim", ["v1", "v2"])  # now o1, v2, v1: v2, the victim's tail, is past the cap
    assert tier.prepare_store(["n1"]) == ["n1"] and "o1" not in tier
    tier.complete_store(["n1"])
    assert tier.prepare_store(["n2"]) == ["n2"] and "v2" not in tier and "v1" in tier
    assert tier.counters.kept_evicted_blocks == 1
    tier.release("victim")  # v2 is gone: only v1 to release
    assert tier.kept_blocks == 0


def test_no_cap_no_hold() -> None:
    tier = CpuKvTier(2)
    _stored(tier, "a")
    assert tier.hold("victim", ["a"]) == 0 and tier.held_owners == 0


def _victim_and_burst() -> list[SimRequest]:
    """An agent preempted for a voice turn that decodes for a while; meanwhile other agents (more
    important than the victim, so admitted before it) store a tier's worth of prompt."""
    burst = [req(f"b{i}", 1.1 + 0.01 * i, 1200, 1, priority=5) for i in range(4)]
    return [req("victim", 0.0, 1800, 300, priority=10), req("voice", 1.0, 2400, 200), *burst]


# A small KV cache and CPU tier, make-room preempting for the voice turn.
ENGINE: dict[str, Any] = {
    "kv_tokens": 4096,
    "cpu_tier_tokens": 4096,
    "enable_prefix_caching": False,
    "scheduler": "make-room",
    "additional_config": MAKE_ROOM,
}


def _run(**config: Any) -> Any:
    return run(_victim_and_burst(), **ENGINE, **config)


def test_a_held_victim_comes_back_by_a_load() -> None:
    lru, held = _run(), _run(cpu_tier_connector=HOLD)
    for result in (lru, held):
        victim = next(r for r in result.records if r.id == "victim")
        assert victim.preemptions == 1 and victim.status == "finished"
    assert lru.cpu_tier["held_preempted"] == 0
    assert held.cpu_tier["held_preempted"] == 1 and held.cpu_tier["held_blocks"] == 1800 // 16
    # Without the hold the burst pushed the victim's blocks out and it recomputed its prompt.
    assert held.cpu_loaded_tokens - lru.cpu_loaded_tokens >= 1800 - 1800 % 16 - 16
    assert held.cpu_tier["evicted_blocks"] > 0


def test_a_held_victim_loaded_inside_the_step_never_waits_on_its_blocks_for_an_asynchronous_load() -> None:
    """`sync_load_preempted`: the victim's hit is loaded inside the step that admits it again, so it is
    scheduled in that step rather than parked on its blocks while an asynchronous load runs."""
    results, parked = {}, {}
    for name, connector in (("async", HOLD), ("sync", HOLD_SYNC)):
        kv = ENGINE["kv_tokens"]
        config = EngineConfig(**ENGINE, cpu_tier_connector=connector, max_model_len=fitting_model_len(kv, 16))
        engine = SimEngine(config, load_profile())
        scheduler, schedule, steps = engine.scheduler, engine.scheduler.schedule, []

        def counting(
            *args: Any, scheduler: Any = scheduler, schedule: Any = schedule, steps: list = steps
        ) -> Any:
            victim = scheduler.requests.get("victim")
            if victim is not None and victim.status.name == "WAITING_FOR_REMOTE_KVS":
                steps.append(victim.status)
            return schedule(*args)

        scheduler.schedule = counting
        results[name], parked[name] = engine.run(_victim_and_burst()), len(steps)
    for result in results.values():
        victim = next(r for r in result.records if r.id == "victim")
        assert victim.preemptions == 1 and victim.status == "finished"
    assert results["async"].cpu_tier["sync_loads"] == 0 and parked["async"] > 0
    assert results["sync"].cpu_tier["sync_loads"] == 1 and parked["sync"] == 0
    assert results["sync"].cpu_loaded_tokens == results["async"].cpu_loaded_tokens  # the same blocks


def test_the_setting_is_validated() -> None:
    with pytest.raises(InputError, match="keep_preempted must be true or false"):
        EngineConfig(cpu_tier_tokens=65536, cpu_tier_connector={"flatshare_protected": {"keep_preempted": 1}})


def test_every_hold_ends_with_its_request_and_an_aborted_victim_holds_nothing() -> None:
    """Held while it waits preempted; a client that disconnects then ends the hold with the request."""
    for aborting in (False, True):
        abort = aborting
        config = EngineConfig(**ENGINE, cpu_tier_connector=HOLD, max_model_len=fitting_model_len(4096, 16))
        engine = SimEngine(config, load_profile())
        for request in _victim_and_burst():
            engine.submit(request)
        held = 0
        while engine.step() is not None:
            held = max(held, int(engine.cpu_tier_counters()["held_requests"]))
            if abort and held and engine.abort("victim"):
                abort = False
        assert held == 1, "the victim was held while it waited"
        assert engine.cpu_tier_counters()["held_requests"] == 0
        assert engine.record("victim").status == ("aborted" if aborting else "finished")
