"""flatshare's offloading connector inside vLLM's own scheduler (no model, no GPU): vLLM loads it and its
policy from the kv-transfer config, a protected request's CPU-tier hit is scheduled in the step that
loads it, an unprotected one still waits for an asynchronous load, and the protected prefix is kept."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import pytest
import torch
from vllm.config import KVTransferConfig
from vllm.distributed.kv_transfer.kv_connector.v1.offloading.common import OffloadingWorkerMetadata
from vllm.v1.core.sched.output import SchedulerOutput
from vllm.v1.core.sched.scheduler import Scheduler
from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec
from vllm.v1.outputs import KVConnectorOutput, ModelRunnerOutput
from vllm.v1.request import RequestStatus
from vllm.v1.structured_output import StructuredOutputManager

from flatshare.connector.config import ProtectedKvConfigError
from flatshare.connector.keep_policy import POLICY_MODULE, POLICY_NAME, KeepProtectedLRU
from flatshare.connector.offloading import CONNECTOR_MODULE, CONNECTOR_NAME, ProtectedOffloadingMetadata
from flatshare.sim.config import EngineConfig
from flatshare.sim.requests import SimRequest
from flatshare.sim.vllm_host import RequestFactory, _vllm_config

pytestmark = pytest.mark.vllm

BLOCK = 16
LAYER = "model.layers.0.self_attn.attn"
POLICY = {"eviction_policy": POLICY_NAME, "cache_policy_module_path": POLICY_MODULE}


def _scheduler(extra: dict[str, Any]) -> Scheduler:
    config = EngineConfig(kv_tokens=4096, max_model_len=2048, enable_prefix_caching=False)
    with tempfile.TemporaryDirectory() as tmp:
        vllm_config = _vllm_config(config, Path(tmp))
    vllm_config.scheduler_config.disable_hybrid_kv_cache_manager = True
    vllm_config.kv_transfer_config = KVTransferConfig(
        kv_connector=CONNECTOR_NAME,
        kv_connector_module_path=CONNECTOR_MODULE,
        kv_role="kv_both",
        kv_connector_extra_config={"cpu_bytes_to_use": 64 << 20, **extra},
    )
    spec = FullAttentionSpec(block_size=BLOCK, num_kv_heads=1, head_size=64, dtype=torch.float16)
    kv_cache_config = KVCacheConfig(
        num_blocks=config.num_gpu_blocks,
        kv_cache_tensors=[],
        kv_cache_groups=[KVCacheGroupSpec([LAYER], spec)],
    )
    return Scheduler(
        vllm_config=vllm_config,
        kv_cache_config=kv_cache_config,
        structured_output_manager=StructuredOutputManager(vllm_config),
        block_size=BLOCK,
        log_stats=True,
    )


class _Worker:
    """The worker's part, played by hand: every transfer a step starts is done by the next step."""

    def __init__(self, scheduler: Scheduler) -> None:
        self.scheduler = scheduler
        self._done: set[int] = set()
        self._async_loads: set[str] = set()

    def step(self) -> SchedulerOutput:
        output = self.scheduler.schedule()
        meta = output.kv_connector_metadata
        assert isinstance(meta, ProtectedOffloadingMetadata)
        sampled = [
            [7]
            if self.scheduler.requests[r].num_computed_tokens >= self.scheduler.requests[r].num_tokens
            else []
            for r in output.num_scheduled_tokens
        ]
        ids = list(output.num_scheduled_tokens)
        # Asynchronous loads report their request; synchronous ones only their job.
        recving, self._async_loads = self._async_loads, set()
        model_output = ModelRunnerOutput(
            req_ids=ids, req_id_to_index={r: i for i, r in enumerate(ids)}, sampled_token_ids=sampled
        )
        model_output.kv_connector_output = KVConnectorOutput(
            finished_recving=recving or None,
            kv_connector_worker_meta=OffloadingWorkerMetadata({j: 1 for j in self._done}),
        )
        self.scheduler.update_from_output(output, model_output)
        self._done = set(meta.store_jobs) | set(meta.load_jobs)
        self._async_loads = {job.req_id for j, job in meta.load_jobs.items() if j not in meta.sync_load_jobs}
        return output


def _request(factory: RequestFactory, rid: str, prompt: tuple[int, ...], priority: int) -> Any:
    return factory.make(SimRequest(rid, 0.0, prompt, 1, priority, "voice" if priority == 0 else "agent"))


def test_a_protected_hit_is_scheduled_in_the_step_that_loads_it() -> None:
    scheduler = _scheduler({"flatshare_protected": {"sync_load": True, "keep_in_tier": True}, **POLICY})
    connector = scheduler.connector
    policy = connector.scheduler.manager._policy  # type: ignore[union-attr]
    assert isinstance(policy, KeepProtectedLRU)
    worker, factory = _Worker(scheduler), RequestFactory(BLOCK)
    prompt = tuple(range(100, 200))  # 6 full blocks and 4 tokens
    scheduler.add_request(_request(factory, "voice1", prompt, 0))
    for _ in range(3):  # prefill and finish; its stores complete
        worker.step()
    assert policy.kept_keys == 6
    scheduler.add_request(_request(factory, "voice2", (*prompt, 1, 2, 3), 0))
    output = worker.step()  # loads 6 blocks, computes the rest and samples: voice2 is done
    new = {r.req_id: r for r in output.scheduled_new_reqs}
    assert new["voice2"].num_computed_tokens == 96 and output.num_scheduled_tokens["voice2"] == 103 - 96
    assert output.has_sync_kv_loads and "voice2" not in scheduler.requests
    meta = output.kv_connector_metadata
    assert isinstance(meta, ProtectedOffloadingMetadata) and len(meta.sync_load_jobs) == 1
    scheduler.add_request(_request(factory, "agent", (*prompt, 4, 5), 1))
    output = worker.step()
    assert scheduler.requests["agent"].status == RequestStatus.WAITING_FOR_REMOTE_KVS
    assert not output.has_sync_kv_loads
    for _ in range(3):
        worker.step()
    assert scheduler.requests.get("voice2") is None and scheduler.requests.get("agent") is None


def test_a_whole_prompt_hit_stops_one_token_short() -> None:
    scheduler = _scheduler({"flatshare_protected": {"sync_load": True}})
    worker, factory = _Worker(scheduler), RequestFactory(BLOCK)
    prompt = tuple(range(100, 164))  # 4 full blocks
    scheduler.add_request(_request(factory, "voice1", prompt, 0))
    for _ in range(3):
        worker.step()
    scheduler.add_request(_request(factory, "voice2", prompt, 0))
    output = worker.step()
    new = {r.req_id: r for r in output.scheduled_new_reqs}
    # vLLM's lookup takes the cap to a partial tail of the last block: all but the last token are loaded.
    assert new["voice2"].num_computed_tokens == 63 and output.num_scheduled_tokens["voice2"] == 1
    assert output.has_sync_kv_loads


def test_keeping_the_prefix_needs_the_policy() -> None:
    with pytest.raises(ProtectedKvConfigError, match=POLICY_NAME):
        _scheduler({"flatshare_protected": {"keep_in_tier": True}})


def _agent_preempted(**settings: bool) -> tuple[Scheduler, _Worker, KeepProtectedLRU]:
    """A scheduler with `keep_preempted` (and `settings`) in which vLLM has just preempted the least
    important of three growing decodes ("agent", 1,200 prompt tokens, stored in the tier) for the other
    two's growth."""
    scheduler = _scheduler({"flatshare_protected": {"keep_preempted": True, **settings}, **POLICY})
    policy = scheduler.connector.scheduler.manager._policy  # type: ignore[union-attr]
    assert isinstance(policy, KeepProtectedLRU)
    worker, factory = _Worker(scheduler), RequestFactory(BLOCK)
    calls = (("agent", 100, 1), ("voice1", 3000, 0), ("voice2", 5000, 0))
    for rid, first, priority in calls:
        request = _request(factory, rid, tuple(range(first, first + 1200 + 200 * (priority == 0))), priority)
        request.max_tokens = 200  # all three together outgrow the 255 blocks
        scheduler.add_request(request)
    for _ in range(400):
        if "agent" in (worker.step().preempted_req_ids or ()):
            return scheduler, worker, policy
    raise AssertionError("vLLM did not preempt the agent for the voice requests' growth")


def test_a_preempted_request_is_held_in_the_tier_until_it_loads_back() -> None:
    """The preempted request's stored prompt is held in the tier until it is admitted again, loads it
    back and ends the hold."""
    scheduler, worker, policy = _agent_preempted()
    assert policy.held_keys == 1200 // BLOCK
    while scheduler.requests["agent"].status != RequestStatus.WAITING_FOR_REMOTE_KVS:
        worker.step()
    assert policy.held_keys == 0, "its load pins what it reads: the hold has ended"
    assert scheduler.requests["agent"].num_computed_tokens >= 1200 - BLOCK
    while "agent" in scheduler.requests:
        worker.step()


def test_a_preempted_request_loads_back_inside_the_step_that_admits_it_again() -> None:
    """`sync_load_preempted`: the agent vLLM preempted is never parked on its blocks for an asynchronous
    load: the step that admits it again loads its held prompt before the forward and schedules the rest;
    make-room counts no in-flight reservation for it, as vLLM applies none."""
    from flatshare.scheduler.vllm_view import _may_load_async

    scheduler, worker, policy = _agent_preempted(sync_load_preempted=True)
    agent = scheduler.requests["agent"]
    assert policy.held_keys == 1200 // BLOCK and not _may_load_async(scheduler, agent)
    loaded_back = False
    while "agent" in scheduler.requests:
        assert agent.status != RequestStatus.WAITING_FOR_REMOTE_KVS
        output = worker.step()
        if "agent" in output.num_scheduled_tokens and output.has_sync_kv_loads:
            meta = output.kv_connector_metadata
            assert isinstance(meta, ProtectedOffloadingMetadata) and meta.sync_load_jobs
            assert agent.num_computed_tokens >= 1200 - BLOCK
            loaded_back = True
    assert loaded_back and policy.held_keys == 0


def test_holding_preempted_requests_needs_the_policy() -> None:
    with pytest.raises(ProtectedKvConfigError, match=POLICY_NAME):
        _scheduler({"flatshare_protected": {"keep_preempted": True}})


def test_a_held_request_aborted_before_it_is_back_ends_its_hold() -> None:
    """A client that disconnects while its request waits preempted: the hold ends with the request, so the
    tier does not keep its blocks for nobody."""
    scheduler, worker, policy = _agent_preempted()
    assert policy.held_keys == 1200 // BLOCK
    scheduler.finish_requests("agent", RequestStatus.FINISHED_ABORTED)
    worker.step()
    assert policy.held_keys == 0


def test_make_room_counts_no_reservation_for_a_request_loaded_inside_the_step() -> None:
    """vLLM keeps an asynchronous load's admission out of the blocks in-flight prefills still need; a
    protected request under `sync_load` is never loaded asynchronously, and make-room's view of it (read
    from this connector's settings, not by asking it) carries no reservation, while an agent's does."""
    from flatshare.scheduler.vllm_view import _load_reservations

    scheduler = _scheduler({"flatshare_protected": {"sync_load": True}})
    worker, factory = _Worker(scheduler), RequestFactory(BLOCK)
    scheduler.add_request(_request(factory, "long", tuple(range(1000, 2500)), 1))
    worker.step()  # its first chunk: the rest of its prefill is in flight
    assert [r.request_id for r in scheduler._inflight_prefills] == ["long"]
    voice, agent = (
        _request(factory, "voice", tuple(range(100, 200)), 0),
        _request(factory, "agent", (1, 2), 1),
    )
    assert _load_reservations(scheduler, voice) == ()
    assert dict(_load_reservations(scheduler, agent))["long"] > 0
