"""`FlatshareOffloadingConnector`: vLLM 0.32's `OffloadingConnector` (the CPU KV tier) with flatshare's
protected-KV settings (`flatshare.connector.config`).

Scheduler side. `sync_load` (and `sync_load_preempted`, for a request vLLM or make-room preempted): a
protected request's lookup is capped one token short of its prompt
(`_max_loadable_tokens`: vLLM schedules at least one token of a request it loads synchronously) and its
hit answered `(hits, False)`, so vLLM's scheduler allocates its blocks, counts the hit as computed and
schedules the rest of the prompt in the same step (`has_sync_kv_loads`). The load job is made as vLLM's
(`update_state_after_alloc`); `build_connector_meta` names it in `ProtectedOffloadingMetadata`'s
`sync_load_jobs`. `keep_in_tier`: a protected request's `ReqContext` carries `ProtectedRequest`, which the
CPU manager's cache policy (`KeepProtectedLRU`) reads; the extra config must name that policy.
`keep_preempted`: when a step's output names a request preempted, the policy holds the offload keys it
stored or loaded (`KeepProtectedLRU.hold`; its pending stores are flushed before the step, as vLLM's); the
hold ends when the request is scheduled again, when its load is planned (the load pins what it reads) or
when it finishes. Needs the same policy.

Worker side. vLLM's model runner calls `start_load_kv` before the forward when the step has synchronous
loads (`KVConnectorModelRunnerMixin._get_kv_connector_output`, `has_sync_kv_loads`; the V2 runner's
`KVConnector.pre_forward`). `OffloadingConnector.wait_for_layer_load` does nothing and its worker names
every finished load in `finished_recving`, which vLLM's scheduler accepts only for a parked request
(`Scheduler._update_from_kv_xfer_finished` asserts the request is finished otherwise). So here
`start_load_kv` submits the step's loads, takes the synchronous ones out of the worker's `_load_jobs`
(their completion still reaches the scheduler side through `completed_jobs`, which unpins their tier
blocks) and waits for them (`OffloadingWorker.wait`: the host blocks on the copies' end events) before
returning, so the forward reads loaded blocks.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from vllm.distributed.kv_transfer.kv_connector.utils import yield_req_data
from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorMetadata, KVConnectorRole
from vllm.distributed.kv_transfer.kv_connector.v1.offloading.common import OffloadingConnectorMetadata
from vllm.distributed.kv_transfer.kv_connector.v1.offloading_connector import OffloadingConnector

from flatshare.connector.config import CONFIG_KEY, ProtectedKvConfig, ProtectedKvConfigError
from flatshare.connector.keep_policy import POLICY_MODULE, POLICY_NAME, KeepProtectedLRU, ProtectedRequest

if TYPE_CHECKING:
    from vllm.config import VllmConfig
    from vllm.forward_context import ForwardContext
    from vllm.v1.core.kv_cache_manager import KVCacheBlocks
    from vllm.v1.core.sched.output import SchedulerOutput
    from vllm.v1.kv_cache_interface import KVCacheConfig
    from vllm.v1.request import Request

logger = logging.getLogger(__name__)

CONNECTOR_NAME = "FlatshareOffloadingConnector"
CONNECTOR_MODULE = "flatshare.connector.offloading"


@dataclass
class ProtectedOffloadingMetadata(OffloadingConnectorMetadata):
    """vLLM's offloading metadata and the step's load jobs the worker must finish before the forward."""

    sync_load_jobs: set[int] = field(default_factory=set)


class FlatshareOffloadingConnector(OffloadingConnector):
    """vLLM's CPU-tier connector with synchronous loads and a kept prefix for protected requests."""

    def __init__(
        self, vllm_config: VllmConfig, role: KVConnectorRole, kv_cache_config: KVCacheConfig
    ) -> None:
        transfer = vllm_config.kv_transfer_config
        extra = (transfer.kv_connector_extra_config if transfer is not None else None) or {}
        self.protected = ProtectedKvConfig.from_extra_config(extra)
        if self.protected.spares and (
            extra.get("eviction_policy") != POLICY_NAME
            or extra.get("cache_policy_module_path") != POLICY_MODULE
        ):
            raise ProtectedKvConfigError(
                f"{CONFIG_KEY}.keep_in_tier and keep_preempted need the tier's policy: set "
                f'"eviction_policy": "{POLICY_NAME}", "cache_policy_module_path": "{POLICY_MODULE}"'
            )
        super().__init__(vllm_config, role, kv_cache_config)
        self._sync_requests: set[str] = set()  # this step's synchronous hits
        self._policy: KeepProtectedLRU | None = None
        if role == KVConnectorRole.SCHEDULER and self.protected.spares:
            policy = getattr(self.scheduler.manager, "_policy", None)
            if not isinstance(policy, KeepProtectedLRU):
                raise ProtectedKvConfigError(
                    f"{CONFIG_KEY}.keep_in_tier / keep_preempted: the CPU tier's manager has no {POLICY_NAME}"
                )
            policy.max_kept_share = self.protected.max_kept_share
            self._policy = policy

    def _loads_sync(self, request: Request) -> bool:
        return self.protected.loads_request_sync(request)

    # -- scheduler side --------------------------------------------------------------------------
    def on_new_request(self, request: Request) -> None:
        super().on_new_request(request)
        if self.protected.keep_in_tier and self.protected.protects(request.priority):
            self.scheduler._req_status[request.request_id].req_context.set_state(ProtectedRequest())

    def _max_loadable_tokens(self, request: Request, num_computed_tokens: int) -> int | None:
        bound = super()._max_loadable_tokens(request, num_computed_tokens)
        if not self._loads_sync(request):
            return bound
        room = max(0, request.num_tokens - 1 - num_computed_tokens)
        return room if bound is None else min(bound, room)

    def get_num_new_matched_tokens(
        self, request: Request, num_computed_tokens: int
    ) -> tuple[int | None, bool]:
        hits, load_async = super().get_num_new_matched_tokens(request, num_computed_tokens)
        self._sync_requests.discard(request.request_id)
        if hits and self._loads_sync(request):
            self._sync_requests.add(request.request_id)
            logger.debug("sync load: %s, %d tokens in the step that admits it", request.request_id, hits)
            return hits, False
        return hits, load_async

    def update_state_after_alloc(
        self, request: Request, blocks: KVCacheBlocks, num_external_tokens: int
    ) -> None:
        super().update_state_after_alloc(request, blocks, num_external_tokens)
        if num_external_tokens and self._policy is not None:
            self._policy.release(request.request_id)  # back: its load pins what it reads

    def _holds(self, scheduler_output: SchedulerOutput) -> None:
        """`keep_preempted`: end the holds of requests scheduled again or finished; hold the keys of the
        requests this step preempted (after `build_connector_meta`, which flushes their stores)."""
        policy = self._policy
        if policy is None or not self.protected.keep_preempted:
            return
        for req_id, _, resumed in yield_req_data(scheduler_output):
            if resumed:
                policy.release(req_id)
        for req_id in scheduler_output.finished_req_ids or ():
            policy.release(req_id)
        states = self.scheduler._req_status
        # A set: sorted, so that the holds touch the tier in the same order whatever the string hashing.
        for req_id in sorted(scheduler_output.preempted_req_ids or ()):
            state = states.get(req_id)
            if state is None:
                continue
            keys = (
                key
                for group in state.group_states
                for key in group.offload_keys[: group.next_stored_chunk_idx]
            )
            held = policy.hold(req_id, keys)
            logger.debug("keep_preempted: %s holds %d chunks in the tier", req_id, held)

    def build_connector_meta(self, scheduler_output: SchedulerOutput) -> KVConnectorMetadata:
        meta = super().build_connector_meta(scheduler_output)
        self._holds(scheduler_output)
        assert isinstance(meta, OffloadingConnectorMetadata)
        sync = {job_id for job_id, job in meta.load_jobs.items() if job.req_id in self._sync_requests}
        self._sync_requests.clear()
        return ProtectedOffloadingMetadata(meta.load_jobs, meta.store_jobs, meta.jobs_to_flush, sync)

    # -- worker side -----------------------------------------------------------------------------
    def start_load_kv(self, forward_context: ForwardContext, **kwargs: Any) -> None:
        super().start_load_kv(forward_context, **kwargs)
        sync = getattr(self._connector_metadata, "sync_load_jobs", None)
        if not sync:
            return
        worker = self.connector_worker
        assert worker is not None and worker.worker is not None
        for job_id in sync:
            worker._load_jobs.pop(job_id, None)  # reported through completed_jobs, not finished_recving
        worker.worker.wait(set(sync))
