"""The CPU tier as vLLM 0.32's OffloadingConnector runs it: async loads that reserve KV blocks, async
stores that become hits only when done, flushes of stores whose blocks are reused, LRU eviction, and a
run that ends with every transfer done and every block back."""

from __future__ import annotations

import dataclasses
import itertools
from typing import Any

import pytest
from vllm.v1.request import RequestStatus

from flatshare.runfiles.sim_records import RequestRecord
from flatshare.sim.config import EngineConfig, fitting_model_len
from flatshare.sim.engine import SimEngine, SimResult, StepReport
from flatshare.sim.profile import ScheduledWork, load_profile
from flatshare.sim.requests import SimRequest
from simkit import req

pytestmark = pytest.mark.vllm

LOADING = RequestStatus.WAITING_FOR_REMOTE_KVS
BLOCK = 16
KV_BYTES = load_profile().kv_bytes_per_token


def _engine(link_bytes_per_s: float | None = None, **config: Any) -> SimEngine:
    """An engine on the default profile, with the host link's bandwidth changed if asked."""
    kv = int(config.get("kv_tokens", EngineConfig.kv_tokens))
    config.setdefault("max_model_len", fitting_model_len(kv, BLOCK))
    profile = load_profile()
    if link_bytes_per_s is not None:
        profile = dataclasses.replace(profile, cpu_load_bytes_per_s=link_bytes_per_s)
    return SimEngine(EngineConfig(**config), profile)


def by_id(result: SimResult) -> dict[str, RequestRecord]:
    return {r.id: r for r in result.records}


def _t(value: float | None) -> float:
    assert value is not None
    return value


def _run(
    engine: SimEngine, requests: list[SimRequest], watch: tuple[str, ...] = ()
) -> tuple[SimResult, list[tuple[float, dict[str, RequestStatus]]], list[StepReport]]:
    """Step to the end, noting the status of the `watch` requests after each step; then `run()` drains
    the transfers still in flight and checks that nothing leaked."""
    steps: list[StepReport] = []
    engine.on_step = steps.append
    for request in requests:
        engine.submit(request)
    states = []
    while engine.step() is not None:
        live = engine.scheduler.requests
        states.append((engine.now, {r: live[r].status for r in watch if r in live}))
    return engine.run(), states, steps


def test_a_reloaded_16k_context_loads_beside_the_steps_and_then_takes_one_step() -> None:
    """A call reloading its own context from the CPU: the load is no step's work; the request waits in
    WAITING_FOR_REMOTE_KVS, then one step computes the rest and samples its first token."""
    profile = load_profile()
    calls = [req("call1", 0.0, 16000, 2, group="s"), req("call2", 10.0, 16100, 2, group="s")]
    # Without prefix caching the GPU keeps nothing of call1: all of call2's context is in the tier.
    engine = _engine(cpu_tier_tokens=65536, enable_prefix_caching=False)
    result, states, _ = _run(engine, calls, watch=("call2",))
    call2 = by_id(result)["call2"]
    load_s = 16000 * KV_BYTES / profile.cpu_load_bytes_per_s
    assert load_s == pytest.approx(0.0839, abs=1e-4)  # 16,000 tokens x 128 KiB at 25 GB/s
    step_s = profile.step_time([ScheduledWork(100, 16000, False)])
    assert call2.ttft_s == pytest.approx(load_s + step_s)
    assert call2.first_scheduled_s == pytest.approx(10.0 + load_s)
    assert call2.wait_s["cpu_load"] == pytest.approx(load_s)
    assert call2.wait_s["prefill"] == pytest.approx(step_s)
    assert any(s.get("call2") == LOADING for t, s in states if 10.0 <= t <= 10.0 + load_s)
    assert result.cpu_loaded_tokens == 16000
    assert result.cpu_tier["loads_finished"] == 1
    assert result.cpu_tier["load_s"] == pytest.approx(load_s)


@pytest.mark.parametrize("async_scheduling", [False, True])
def test_steps_running_during_a_load_are_not_lengthened_by_it(async_scheduling: bool) -> None:
    profile = load_profile()
    requests = [
        req("call1", 0.0, 16000, 2, group="s"),
        req("decoder", 9.0, 300, 200, priority=1),
        req("call2", 10.0, 16100, 2, group="s"),
    ]
    engine = _engine(cpu_tier_tokens=65536, enable_prefix_caching=False, async_scheduling=async_scheduling)
    result, states, steps = _run(engine, requests, watch=("call2",))
    load_s = profile.load_time(16000)
    loading = [t for t, s in states if s.get("call2") == LOADING]
    assert loading and max(loading) - min(loading) >= load_s * 0.9, (
        "the decoder kept stepping during the load"
    )
    window = [s for s in steps if 10.0 <= s.start_s <= 10.0 + 2 * load_s]
    assert len(window) >= 4
    assert max(s.end_s - s.start_s for s in window) < load_s / 1.5  # a decode step, or the 100-token one
    call2 = by_id(result)["call2"]
    # Admitted with the decoder's step; the load starts when that step ends, is reported by the first step
    # starting after it, and the next step computes the last 100 tokens.
    assert _t(call2.ttft_s) > load_s + 2 * profile.step_fixed_s
    assert call2.wait_s["cpu_load"] >= load_s


def test_a_waiting_request_waits_behind_blocks_reserved_for_a_load() -> None:
    """Waiting behind memory an agent reserved for its load: the agent's resumed context is allocated
    when its load is admitted, so a voice turn that would fit in the free cache waits until the load is
    done and the agent has run."""
    # 511 usable blocks; the agent's context (250 blocks) is in the tier, a decoder holds ~150 blocks.
    # A slow host link (2.5 GB/s) makes the 4,000-token load take 0.21 s.
    base = [
        req("agent1", 0.0, 4000, 1, priority=10, group="a"),
        req("decoder", 1.0, 2400, 300, priority=5),
        req("voice", 2.1, 2000, 4, priority=0),  # 125 blocks
    ]
    agent2 = req("agent2", 2.0, 4100, 1, priority=10, group="a")
    config = {"kv_tokens": 8192, "cpu_tier_tokens": 65536, "enable_prefix_caching": False}
    alone, _, _ = _run(_engine(2.5e9, **config), base)
    assert _t(by_id(alone)["voice"].first_scheduled_s) < 2.13
    engine = _engine(2.5e9, **config)
    result, states, _ = _run(engine, [*base, agent2], watch=("agent2", "voice"))
    records = by_id(result)
    voice, agent = records["voice"], records["agent2"]
    blocked = [t for t, s in states if s.get("agent2") == LOADING and s.get("voice") == RequestStatus.WAITING]
    assert blocked and min(blocked) < 2.15, "the voice turn waits while the agent's blocks are reserved"
    assert _t(voice.first_scheduled_s) >= _t(agent.first_scheduled_s) > 2.0 + 0.21
    assert voice.wait_s["kv_memory"] > 0.15
    assert _t(voice.ttft_s) > _t(by_id(alone)["voice"].ttft_s) + 0.15


def test_a_step_reusing_a_finished_requests_blocks_waits_for_their_stores() -> None:
    """Stores run behind the steps; a finished request's blocks are freed at once, and the step that
    reuses one whose store is still in flight waits for it (vLLM's flush)."""
    requests = [req("x", 0.0, 3000, 1, group="x"), req("y", 0.5, 2000, 1, group="y")]
    config = {"kv_tokens": 4096, "cpu_tier_tokens": 65536, "enable_prefix_caching": False}
    # At 0.5 GB/s a 512-token chunk takes 0.13 s to store, twice the step computing it.
    slow, _, steps = _run(_engine(5e8, **config), requests)
    x, y = by_id(slow)["x"], by_id(slow)["y"]
    x_stores_s = 187 * BLOCK * KV_BYTES / 5e8  # x's full prompt blocks
    assert _t(x.finish_s) < 0.4 < x_stores_s
    flushed = [s for s in steps if s.flush_wait_s > 0]
    assert len(flushed) == 1 and flushed[0].scheduled == {"y": 512}
    assert flushed[0].start_s == pytest.approx(0.5 + flushed[0].flush_wait_s)
    assert slow.cpu_tier["flush_waits"] == 1
    assert slow.cpu_tier["flush_s"] == pytest.approx(flushed[0].flush_wait_s)
    assert y.wait_s["store_flush"] == pytest.approx(flushed[0].flush_wait_s)
    fast, _, _ = _run(_engine(None, **config), requests)
    assert fast.cpu_tier["flush_waits"] == 0
    assert _t(by_id(fast)["y"].ttft_s) < _t(y.ttft_s) - 0.2


def test_a_block_is_not_a_hit_before_its_store_completes() -> None:
    """A request whose context is still being stored does not hit it: vLLM defers its lookup until the
    stores are done, and then loads all of it."""
    requests = [req("x", 0.0, 3000, 1, group="s"), req("z", 0.45, 3100, 1, group="s")]
    config = {"kv_tokens": 8192, "cpu_tier_tokens": 65536, "enable_prefix_caching": False}
    result, _, steps = _run(_engine(5e8, **config), requests)
    x, z = by_id(result)["x"], by_id(result)["z"]
    stores_done_after = steps[0].end_s + 187 * BLOCK * KV_BYTES / 5e8  # the link starts after x's 1st step
    assert _t(x.finish_s) < 0.45 < stores_done_after
    assert _t(z.first_scheduled_s) >= stores_done_after
    assert result.cpu_tier["deferred_lookups"] >= 1
    assert result.cpu_tier["loads"] == 1 and result.cpu_loaded_tokens == 187 * BLOCK


def test_the_tier_evicts_the_least_recently_used_blocks() -> None:
    """A 200-block tier holds contexts a and b (100 blocks each). a is used again, so c evicts b; then
    a is used again and b (recomputed) evicts c."""
    requests = [
        req("a1", 0.0, 1600, 1, group="a"),
        req("b1", 1.0, 1600, 1, group="b"),
        req("a2", 2.0, 1600, 1, group="a"),  # a full hit: loaded, then its last token recomputed
        req("c1", 3.0, 1600, 1, group="c"),
        req("a3", 4.0, 1600, 1, group="a"),
        req("b2", 5.0, 1600, 1, group="b"),
        req("a4", 6.0, 1600, 1, group="a"),
        req("c2", 7.0, 1600, 1, group="c"),
    ]
    config = {"kv_tokens": 8192, "cpu_tier_tokens": 200 * BLOCK, "enable_prefix_caching": False}
    result, _, _ = _run(_engine(None, **config), requests)
    records = by_id(result)
    loaded = {r for r in records if records[r].wait_s["cpu_load"] > 0}
    assert loaded == {"a2", "a3", "a4"}
    assert result.cpu_loaded_tokens == 3 * 1600
    assert _t(records["b2"].ttft_s) > 5 * _t(records["a3"].ttft_s)
    # b by c1, c by b2, b by c2: each 100 blocks.
    assert result.cpu_tier["evicted_blocks"] == 300
    assert result.cpu_tier["tier_blocks"] == 200


def test_only_prompt_blocks_are_stored() -> None:
    """vLLM 0.32's offloading stores prompt blocks only (`offload_prompt_only` defaults to True)."""
    result, _, _ = _run(_engine(None, cpu_tier_tokens=65536), [req("r", 0.0, 1600, 400)])
    assert result.cpu_tier["stored_blocks"] == 100


@pytest.mark.parametrize("async_scheduling", [False, True])
def test_every_transfer_finishes_and_no_block_leaks_under_pressure(async_scheduling: bool) -> None:
    """Eight sessions come back after their contexts left a small GPU cache; first-chunk admission
    overcommits it (preemptions), a slow link makes steps flush, and the tier is smaller than the
    contexts. Every request finishes, every load and store is reported, and `run()` finds every GPU
    block free (it raises otherwise)."""
    requests = [
        req(f"s{s}-{turn}", 4.0 * turn + 0.1 * s, 1500 + 97 * s + 300 * turn, 200 + 17 * s, s % 4, f"s{s}")
        for turn, s in itertools.product(range(2), range(8))
    ]
    engine = _engine(
        5e8,
        kv_tokens=6000,
        max_num_seqs=8,
        cpu_tier_tokens=8000,
        scheduler_reserve_full_isl=False,
        async_scheduling=async_scheduling,
    )
    result = engine.run(requests)
    tier = result.cpu_tier
    assert all(r.status == "finished" and len(r.token_times_s) == r.max_tokens for r in result.records)
    assert (
        result.preemptions > 5
        and tier["loads"] > 5
        and tier["flush_waits"] > 0
        and tier["evicted_blocks"] > 0
    )
    assert tier["loads_started"] == tier["loads_finished"] == tier["loads"]
    assert tier["stores_started"] == tier["stores_finished"] == tier["stores"]
    assert tier["load_tokens"] == result.cpu_loaded_tokens
    assert engine.scheduler.kv_cache_manager.block_pool.get_num_free_blocks() == 6000 // BLOCK - 1


def test_an_aborted_request_keeps_its_blocks_until_its_load_ends() -> None:
    engine = _engine(2.5e9, cpu_tier_tokens=65536, enable_prefix_caching=False)
    engine.run([req("call1", 0.0, 8000, 1, group="s")])
    engine.submit(req("call2", 10.0, 8100, 1, group="s"))
    while (
        engine.scheduler.requests.get("call2") is None or engine.scheduler.requests["call2"].status != LOADING
    ):
        engine.step()
    pool = engine.scheduler.kv_cache_manager.block_pool
    usable = engine.config.num_gpu_blocks - 1
    assert pool.get_num_free_blocks() < usable
    engine.scheduler.finish_requests("call2", RequestStatus.FINISHED_ABORTED)
    assert pool.get_num_free_blocks() < usable, "vLLM frees a loading request's blocks after the load"
    while engine.has_work():
        engine.step()
    assert pool.get_num_free_blocks() == usable
    assert engine.now >= 10.0 + 10 * load_profile().load_time(8000)  # a tenth of the default link


def test_a_request_sent_during_a_wait_for_a_load_is_seen_at_its_time() -> None:
    """A driver that submits requests only once the engine's clock has passed them (the virtual replay)
    still has them seen when sent, not at the end of an idle wait for a transfer."""
    engine = _engine(1e9, cpu_tier_tokens=65536, enable_prefix_caching=False)
    engine.run([req("call1", 0.0, 8000, 1, group="s")])
    engine.submit(req("call2", 10.0, 8100, 1, group="s"))  # a 1 s load
    while engine.now < 10.5:
        engine.step()
    engine.submit(req("voice", 10.2, 300, 2))
    result = engine.run()
    voice = by_id(result)["voice"]
    assert voice.first_scheduled_s == pytest.approx(10.2)
    assert _t(voice.ttft_s) < 0.1
