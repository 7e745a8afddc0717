"""The simulated CPU KV tier as a vLLM v1 KV connector: vLLM 0.32's `OffloadingConnector`.

`SimCpuTierConnector` is the scheduler side, as vLLM's `OffloadingConnectorScheduler`
(vllm/distributed/kv_transfer/kv_connector/v1/offloading/scheduler.py) runs it for one full-attention
KV group, one GPU block per offloaded chunk, and the CPU backend's defaults (`CpuKvTier`: LRU).
`SimOffloadWorker` (`flatshare.sim.offload_worker`) is the worker side (`OffloadingConnectorWorker`, offloading/worker.py, and the CPU
transfer handlers in vllm/v1/kv_offload/cpu/gpu_worker.py), played by the simulated engine on its
virtual clock. What vLLM 0.32 does, and what the simulator keeps:

Loads are asynchronous. `get_num_new_matched_tokens` returns `(hits, bool(hits))`: on a hit the
scheduler allocates the request's blocks (they count as used KV), sets its computed tokens and parks it
in WAITING_FOR_REMOTE_KVS without giving it any of the step's token budget (vllm/v1/core/sched/
scheduler.py, `Scheduler.schedule`, the `load_kv_async` branch); `update_state_after_alloc` turns the
hit into a load job. The worker submits the job after launching the step's forward pass
(`KVConnectorModelRunnerMixin._get_kv_connector_output`, `start_load_kv`), and the copy stream first
waits for the compute stream (`SingleDirectionOffloadingHandler.transfer_async`:
`stream.wait_stream(current_stream)`), so a load starts when the step that admitted it ends. Transfers
of one direction run one after another (same handler: "its stream will start executing only after the
streams of previous transfers have finished"). The worker polls for finished transfers once a step,
right after launching the forward (`get_finished`); a finished load comes back as `finished_recving`
in that step's `KVConnectorOutput`, `Scheduler._update_from_kv_xfer_finished` records it, and the next
`schedule()` moves the request back to waiting with those tokens computed
(`_handle_blocked_waiting_request`, `_update_waiting_for_remote_kv`) and schedules it normally.
A lookup is deferred (`(None, False)`: the scheduler skips the request this step) while the request
has transfers of its own in flight, while a block it would hit is still being stored
(`LookupResult.HIT_PENDING` in `_maximal_prefix_lookup`), or, with prefix caching on, while another
request is loading one of those blocks (`_chunks_being_loaded` in `_lookup_complete_chunks`).

Stores are asynchronous too. Each step `build_connector_meta` plans a store job per scheduled request
for its blocks that will be full after the step (`_build_store_jobs`); only prompt blocks, as
`offload_prompt_only` is on by default (vllm/v1/kv_offload/base.py, `OffloadingSpec.__init__`), and
only blocks the request did not itself load (`OffloadPolicy.CHUNK_LEVEL`). The worker queues the jobs
at the end of the step and submits them when the next one starts (`prepare_store_kv`,
`start_kv_transfers`). A stored block is a hit only once the worker has reported the job done
(`update_connector_output`, `complete_store`). `request_finished` returns `(False, None)`: a finished
request's blocks are freed at once, but its pending stores are fenced (`_block_id_to_pending_jobs`):
when a step re-allocates one of those blocks (to any request, a prefix hit included, as the step's new
block ids), or preempts a request with stores pending, `build_connector_meta` puts the jobs in
`jobs_to_flush` and the worker waits for them before the step runs (`handle_preemptions`:
`worker.wait(jobs_to_flush)`).

With flatshare's protected-KV settings (`flatshare.connector.config`, `flatshare_protected` in the extra
config; `flatshare.connector.offloading` is the same for a real vLLM): `sync_load` answers a protected
request's hit `(hits, False)`, at most one token short of its prompt, so vLLM schedules it in the step
that allocates its blocks (`has_sync_kv_loads`) and the worker loads the blocks before that step's
forward; the load is a job like any other (the tier pins its blocks, the scheduler side sees it
complete through `completed_jobs`) but is never named in `finished_recving` (the request is running).
`keep_in_tier` marks the blocks a protected request stores, loads or reuses as kept in the tier
(`CpuKvTier.keep`). `keep_preempted` holds a preempted request's blocks in the tier (`CpuKvTier.hold`,
when a step's output names it preempted) until it is scheduled again, loads them back, or ends.

The simulator's simplifications: a job takes `tokens * kv_bytes_per_token / cpu_load_bytes_per_s`
(the profile's link; the same rate both ways, each direction on its own queue); a step's stores are
submitted when its forward ends rather than when the next step starts (the same time while vLLM's
engine keeps stepping, which it does while jobs are in flight); and only what the defaults use is
kept: one worker, no transfer failures, no store threshold, no partial-block tails, no `reset_cache`.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from vllm.distributed.kv_transfer.kv_connector.utils import yield_req_data
from vllm.distributed.kv_transfer.kv_connector.v1.base import (
    KVConnectorBase_V1,
    KVConnectorMetadata,
    KVConnectorRole,
    KVConnectorWorkerMetadata,
)
from vllm.v1.outputs import KVConnectorOutput
from vllm.v1.request import RequestStatus

from flatshare.connector.config import ProtectedKvConfig
from flatshare.sim.cpu_tier import CpuKvTier

if TYPE_CHECKING:
    from vllm.config import VllmConfig
    from vllm.v1.core.kv_cache_manager import KVCacheBlocks
    from vllm.v1.core.sched.output import SchedulerOutput
    from vllm.v1.kv_cache_interface import KVCacheConfig
    from vllm.v1.request import Request

logger = logging.getLogger(__name__)

CONNECTOR_NAME = "SimCpuTierConnector"
CONNECTOR_MODULE = "flatshare.sim.connector"


@dataclass(frozen=True)
class TransferJob:
    """One load or store: the blocks it moves (by hash), their GPU block ids, its size in tokens."""

    job_id: int
    req_id: str
    keys: tuple[Hashable, ...]
    tokens: int
    is_store: bool
    block_ids: tuple[int, ...] = ()
    dst_block_ids: tuple[int, ...] = ()
    """A load's GPU blocks, the ones a failed load leaves invalid."""
    sync: bool = False
    """A synchronous load: the worker runs it before the forward of the step that admitted the request."""


@dataclass
class SimTransferMeta(KVConnectorMetadata):
    """A step's jobs, as vLLM's `OffloadingConnectorMetadata`."""

    load_jobs: dict[int, TransferJob]
    store_jobs: dict[int, TransferJob]
    jobs_to_flush: set[int]


@dataclass
class SimWorkerMeta(KVConnectorWorkerMetadata):
    """The jobs the worker saw finish this step, as vLLM's `OffloadingWorkerMetadata`."""

    completed_jobs: set[int] = field(default_factory=set)

    def aggregate(self, other: KVConnectorWorkerMetadata) -> KVConnectorWorkerMetadata:
        assert isinstance(other, SimWorkerMeta)
        return SimWorkerMeta(self.completed_jobs | other.completed_jobs)


@dataclass
class ConnectorCounters:
    loaded_tokens: int = 0
    """Tokens of the loads started (every load finishes before a run ends)."""
    loads: int = 0
    stores: int = 0
    deferred_lookups: int = 0
    """Lookups answered `None` (own transfers, a block being stored or being loaded)."""
    dropped_stores: int = 0
    sync_loads: int = 0
    """Loads (of `loads`) made synchronous: protected requests' (`sync_load`) and preempted ones'
    (`sync_load_preempted`)."""
    sync_loaded_tokens: int = 0
    held_preempted: int = 0
    """Preempted requests whose blocks the tier held for their return (`keep_preempted`)."""
    held_blocks: int = 0


@dataclass
class _RequestState:
    request: Request
    block_ids: list[int] = field(default_factory=list)
    next_stored: int = 0
    local_tokens: int = 0
    jobs: set[int] = field(default_factory=set)
    used: set[int] = field(default_factory=set)  # block indices the request loaded or offered
    finished_signaled: bool = False
    sync_hit: bool = False  # the last lookup answered a synchronous hit


def _host_hit_source() -> Any:
    """vLLM's label for prefix hits served from host memory (its metrics); None before vLLM 0.32."""
    try:
        from vllm.v1.metrics.cache_hit_source import CacheHitSource
    except ImportError:
        return None
    return CacheHitSource.HOST


class SimCpuTierConnector(KVConnectorBase_V1):
    """Scheduler-side connector over a `CpuKvTier`; the worker side is `SimOffloadWorker`."""

    def __init__(
        self, vllm_config: VllmConfig, role: KVConnectorRole, kv_cache_config: KVCacheConfig
    ) -> None:
        super().__init__(vllm_config, role, kv_cache_config)
        transfer = vllm_config.kv_transfer_config
        assert transfer is not None
        extra = transfer.kv_connector_extra_config or {}
        self.protected = ProtectedKvConfig.from_extra_config(extra)
        blocks = int(extra["cpu_tier_blocks"])
        kept = int(blocks * self.protected.max_kept_share) if self.protected.spares else 0
        self.tier = CpuKvTier(blocks, max_kept_blocks=kept)
        self.block_size = vllm_config.cache_config.block_size
        self.offload_prompt_only = bool(extra.get("offload_prompt_only", True))
        self.counters = ConnectorCounters()
        self._states: dict[str, _RequestState] = {}
        self._jobs: dict[int, TransferJob] = {}
        self._job_ids = itertools.count()
        self._fences: dict[int, set[int]] = {}  # GPU block id -> pending store jobs of finished requests
        self._being_loaded: set[Hashable] | None = (
            set() if vllm_config.cache_config.enable_prefix_caching else None
        )
        self._batch_loads: dict[int, TransferJob] = {}
        self._batch_flush: set[int] = set()
        self._batch_allocated: set[int] = set()

    @property
    def requires_kv_delivery(self) -> bool:
        # As OffloadingConnector: a best-effort cache, a dropped store is only a later miss.
        return False

    @property
    def loaded_tokens_total(self) -> int:
        return self.counters.loaded_tokens

    @property
    def jobs_in_flight(self) -> int:
        return len(self._jobs)

    # -- scheduler side ------------------------------------------------------------------------------
    def on_new_request(self, request: Request) -> None:
        self._states[request.request_id] = _RequestState(request)

    def _state(self, request: Request) -> _RequestState:
        state = self._states.get(request.request_id)
        if state is None:
            state = self._states[request.request_id] = _RequestState(request)
        return state

    def get_num_new_matched_tokens(
        self, request: Request, num_computed_tokens: int
    ) -> tuple[int | None, bool]:
        state = self._state(request)
        state.block_ids.clear()
        state.sync_hit = False
        if state.jobs:
            self.counters.deferred_lookups += 1
            return None, False
        state.local_tokens = num_computed_tokens
        start = num_computed_tokens // self.block_size
        # vLLM's offloading connector may hit the whole prompt; the scheduler then recomputes its last
        # token (`_update_waiting_for_remote_kv`).
        end = min(request.num_tokens // self.block_size, len(request.block_hashes))
        if end <= start:
            return 0, False
        keys = request.block_hashes[start:end]
        hits = self.tier.lookup(keys)
        if hits and self._being_loaded and any(key in self._being_loaded for key in keys[:hits]):
            hits = None  # another request is loading some of them
        if hits is None:
            self.counters.deferred_lookups += 1
            return None, False
        if self.protected.loads_request_sync(request):
            # vLLM schedules at least one token of a request it loads synchronously.
            hits = max(0, min(hits, (request.num_tokens - 1) // self.block_size - start))
            state.sync_hit = hits > 0
            return hits * self.block_size, False
        return hits * self.block_size, hits > 0

    def _keeps(self, request: Request) -> bool:
        return self.protected.keep_in_tier and self.protected.protects(request.priority)

    def update_state_after_alloc(
        self, request: Request, blocks: KVCacheBlocks, num_external_tokens: int
    ) -> None:
        if num_external_tokens == 0:
            return
        state = self._states[request.request_id]
        self.tier.release(request.request_id)  # back: its load pins what it reads
        self._batch_allocated.update(b for b in blocks.get_block_ids()[0] if b != 0)
        start = state.local_tokens // self.block_size
        end = (state.local_tokens + num_external_tokens) // self.block_size
        keys = tuple(request.block_hashes[start:end])
        self.tier.prepare_load(keys)
        if self._keeps(request):
            self.tier.keep(keys)
        dst = tuple(blocks.get_block_ids()[0][start:end])
        sync = state.sync_hit
        job_id = next(self._job_ids)
        job = TransferJob(
            job_id, request.request_id, keys, num_external_tokens, False, dst_block_ids=dst, sync=sync
        )
        assert not state.jobs, "a load is issued only when the request has no other transfer"
        state.jobs.add(job.job_id)
        self._jobs[job.job_id] = self._batch_loads[job.job_id] = job
        if self._being_loaded is not None:
            self._being_loaded.update(keys)
        state.next_stored = end  # OffloadPolicy.CHUNK_LEVEL: what it loaded is not stored again
        state.used.update(range(start, end))
        self.counters.loads += 1
        self.counters.loaded_tokens += num_external_tokens
        if sync:
            self.counters.sync_loads += 1
            self.counters.sync_loaded_tokens += num_external_tokens
            logger.debug("sync load: %s, %d tokens in this step", request.request_id, num_external_tokens)

    def build_connector_meta(self, scheduler_output: SchedulerOutput) -> KVConnectorMetadata:
        for req_id, new_block_ids, resumed in yield_req_data(scheduler_output):
            state = self._states.get(req_id)
            if state is None:
                continue
            if resumed:
                state.block_ids.clear()
                self.tier.release(req_id)
            if new_block_ids:
                state.block_ids.extend(new_block_ids[0])
                self._batch_allocated.update(b for b in new_block_ids[0] if b != 0)
        for req_id in sorted(scheduler_output.preempted_req_ids or ()):  # holds touch the tier: in order
            preempted = self._states.get(req_id)
            if preempted is not None:
                self._batch_flush.update(preempted.jobs)
                if self.protected.keep_preempted:
                    self._hold(preempted)
        if self._fences:
            for block_id in self._batch_allocated.intersection(self._fences):
                self._batch_flush.update(self._fences[block_id])
        meta = SimTransferMeta(self._batch_loads, self._build_store_jobs(scheduler_output), self._batch_flush)
        for req_id in sorted(scheduler_output.finished_req_ids or ()):  # sets: keep runs reproducible
            finished = self._states.get(req_id)
            if finished is None:
                continue
            finished.finished_signaled = True
            self.tier.release(req_id)
            hashes = finished.request.block_hashes
            used = [hashes[i] for i in sorted(finished.used) if i < len(hashes)]
            self.tier.touch(used)
            if self._keeps(finished.request):
                self.tier.keep(used)
            if not finished.jobs:
                del self._states[req_id]
        self._batch_loads, self._batch_flush, self._batch_allocated = {}, set(), set()
        return meta

    def _hold(self, state: _RequestState) -> None:
        """Hold what a preempted request stored or used in the tier until it comes back (its pending
        stores are flushed before the step runs, so they complete as held blocks)."""
        held = self.tier.hold(state.request.request_id, state.request.block_hashes[: state.next_stored])
        if held:
            self.counters.held_preempted += 1
            self.counters.held_blocks += held

    def _build_store_jobs(self, scheduler_output: SchedulerOutput) -> dict[int, TransferJob]:
        jobs: dict[int, TransferJob] = {}
        scheduled = scheduler_output.num_scheduled_tokens
        for req_id in itertools.chain(scheduled, sorted(scheduler_output.finished_req_ids or ())):
            state = self._states.get(req_id)
            if state is None:
                continue
            request = state.request
            if request.status == RequestStatus.FINISHED_ABORTED:
                after = request.num_computed_tokens
            elif request.is_finished():
                after = max(request.num_prompt_tokens, request.num_tokens - 1)
            else:
                after = request.num_computed_tokens + scheduled[req_id]
            offloadable = min(after, request.num_tokens)
            if self.offload_prompt_only:
                offloadable = min(offloadable, request.num_prompt_tokens)
            full = min(offloadable // self.block_size, len(state.block_ids), len(request.block_hashes))
            start = state.next_stored
            if full <= start:
                continue
            keys = request.block_hashes[start:full]
            state.used.update(
                start + i for i, key in enumerate(keys) if key not in self.tier or self.tier.is_ready(key)
            )
            kept_before = self.tier.counters.kept_evicted_blocks
            stored = self.tier.prepare_store(keys)
            if self.tier.counters.kept_evicted_blocks > kept_before:
                evicted = self.tier.counters.kept_evicted_blocks - kept_before
                logger.debug("tier: %d kept blocks evicted to store %s's", evicted, req_id)
            if stored is None:
                self.counters.dropped_stores += 1  # retried next step: `next_stored` stays
                continue
            state.next_stored = full
            if self._keeps(request):
                self.tier.keep(keys)
            if not stored:
                continue
            new = set(stored)
            block_ids = tuple(state.block_ids[start + i] for i, key in enumerate(keys) if key in new)
            job = TransferJob(
                next(self._job_ids), req_id, tuple(stored), len(stored) * self.block_size, True, block_ids
            )
            state.jobs.add(job.job_id)
            self._jobs[job.job_id] = jobs[job.job_id] = job
            self.counters.stores += 1
            if request.is_finished():
                for block_id in block_ids:
                    self._fences.setdefault(block_id, set()).add(job.job_id)
                    if block_id in self._batch_allocated:
                        self._batch_flush.add(job.job_id)
        return jobs

    def request_finished(self, request: Request, block_ids: list[int]) -> tuple[bool, dict[str, Any] | None]:
        """Free the blocks at once (`(False, None)`, as 0.32), fencing those with a store in flight."""
        state = self._states.get(request.request_id)
        if state is None:
            return False, None
        for job_id in state.jobs:
            for block_id in self._jobs[job_id].block_ids:
                self._fences.setdefault(block_id, set()).add(job_id)
        return False, None

    def update_connector_output(self, connector_output: KVConnectorOutput) -> None:
        meta = connector_output.kv_connector_worker_meta
        if not isinstance(meta, SimWorkerMeta):
            return
        for job_id in sorted(meta.completed_jobs):
            job = self._jobs.pop(job_id)
            state = self._states[job.req_id]
            if job.is_store:
                self.tier.complete_store(job.keys)
            else:
                self.tier.complete_load(job.keys)
                if self._being_loaded is not None:
                    self._being_loaded.difference_update(job.keys)
            for block_id in job.block_ids:
                fenced = self._fences.get(block_id)
                if fenced is not None:
                    fenced.discard(job_id)
                    if not fenced:
                        del self._fences[block_id]
            state.jobs.discard(job_id)
            if state.finished_signaled and not state.jobs:
                del self._states[job.req_id]

    def has_pending_push_work(self) -> bool:
        """vLLM keeps its engine stepping while jobs are in flight (`Scheduler.has_requests`)."""
        return bool(self._jobs)

    # Worker side: played by the engine through `SimOffloadWorker`, so these are never called.
    def start_load_kv(self, forward_context: Any, **kwargs: Any) -> None:
        raise NotImplementedError("simulated connector: the engine plays the worker")

    def wait_for_layer_load(self, layer_name: str) -> None:
        raise NotImplementedError("simulated connector: the engine plays the worker")

    def save_kv_layer(self, layer_name: str, kv_layer: Any, attn_metadata: Any, **kwargs: Any) -> None:
        raise NotImplementedError("simulated connector: the engine plays the worker")

    def wait_for_save(self) -> None:
        raise NotImplementedError("simulated connector: the engine plays the worker")


_HOST_HIT_SOURCE = _host_hit_source()
if _HOST_HIT_SOURCE is not None:
    SimCpuTierConnector._cache_hit_source = _HOST_HIT_SOURCE
