"""The worker side of the simulated CPU tier (`SimOffloadWorker`), played by the simulated engine.

See `flatshare.sim.connector` for what vLLM 0.32's offloading connector does and what the simulator keeps.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass

from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorMetadata
from vllm.v1.outputs import KVConnectorOutput

from flatshare.sim.connector import SimTransferMeta, SimWorkerMeta, TransferJob


@dataclass
class TransferCounters:
    loads_started: int = 0
    loads_finished: int = 0
    load_tokens: int = 0
    load_s: float = 0.0
    """Seconds the host-to-device link was busy."""
    stores_started: int = 0
    stores_finished: int = 0
    store_tokens: int = 0
    store_s: float = 0.0
    """Seconds the device-to-host link was busy."""
    flush_waits: int = 0
    """Steps that waited for a flushed store before starting."""
    flushed_jobs: int = 0
    flush_s: float = 0.0
    loads_failed: int = 0
    """Loads reported as failed (`failed_recving` or `invalid_block_ids`)."""
    sync_load_steps: int = 0
    """Steps whose forward waited for synchronous loads (`sync_load`)."""
    sync_load_wait_s: float = 0.0
    """Seconds those forwards waited."""


def failing_fraction(fraction: float) -> Callable[[TransferJob], bool]:
    """A load-failure rule that fails about `fraction` of loads, the same ones in every run (a hash of
    the request id and the job's number, not a random draw)."""

    def fails(job: TransferJob) -> bool:
        if fraction <= 0.0:
            return False
        digest = hashlib.blake2b(f"{job.req_id}/{job.job_id}".encode(), digest_size=8).digest()
        return int.from_bytes(digest, "big") / 2**64 < fraction

    return fails


@dataclass(frozen=True)
class _Submitted:
    job: TransferJob
    start_s: float
    end_s: float


class SimOffloadWorker:
    """The worker side of `SimCpuTierConnector`: two serial links, host-to-device for loads and
    device-to-host for stores (PCIe is full duplex, and vLLM runs one transfer handler per direction),
    each job taking `tokens * seconds_per_token` once the link and the forward it waits for are done.
    The engine calls `begin_step` when a step is launched (it returns when the forward can start, after
    any flush), `poll` at that time, and `end_step` with the time the forward ends."""

    def __init__(
        self,
        load_s_per_token: float,
        store_s_per_token: float,
        fail_load: Callable[[TransferJob], bool] | None = None,
        failure_report: str = "request",
    ) -> None:
        self._s_per_token = {False: load_s_per_token, True: store_s_per_token}
        self._free_s = {False: 0.0, True: 0.0}
        self._submitted: dict[int, _Submitted] = {}  # not reported yet
        self.counters = TransferCounters()
        self.fail_load: Callable[[TransferJob], bool] = fail_load or failing_fraction(0.0)
        """Which finished loads are reported as failed: a connector's worker reports a load it could not
        complete in the same output as its finish, as vLLM's offloading connector does."""
        self.failure_report = failure_report
        """How a failed load is reported: "request" (`failed_recving`) or "blocks" (its first GPU block
        in `invalid_block_ids`)."""

    def _submit(self, job: TransferJob, t: float) -> None:
        start = max(t, self._free_s[job.is_store])
        duration = job.tokens * self._s_per_token[job.is_store]
        self._free_s[job.is_store] = start + duration
        self._submitted[job.job_id] = _Submitted(job, start, start + duration)
        c = self.counters
        if job.is_store:
            c.stores_started += 1
            c.store_tokens += job.tokens
            c.store_s += duration
        else:
            c.loads_started += 1
            c.load_tokens += job.tokens
            c.load_s += duration

    def begin_step(self, meta: KVConnectorMetadata | None, t: float) -> float:
        """`handle_preemptions`: submit this step's flushed stores now and wait for every flushed job.
        Returns the time the step's forward can start."""
        if not isinstance(meta, SimTransferMeta) or not meta.jobs_to_flush:
            return t
        for job_id in sorted(meta.jobs_to_flush):
            job = meta.store_jobs.get(job_id)
            if job is not None:
                self._submit(job, t)
        ready = max((self._submitted[j].end_s for j in meta.jobs_to_flush if j in self._submitted), default=t)
        self.counters.flushed_jobs += len(meta.jobs_to_flush)
        if ready > t:
            self.counters.flush_waits += 1
            self.counters.flush_s += ready - t
        return max(t, ready)

    def start_sync_loads(self, meta: KVConnectorMetadata | None, t: float) -> float:
        """`start_load_kv` before the forward (vLLM's `has_sync_kv_loads`): submit the step's synchronous
        loads at `t` and return when the forward can start, once they are all done."""
        if not isinstance(meta, SimTransferMeta):
            return t
        jobs = [meta.load_jobs[j] for j in sorted(meta.load_jobs) if meta.load_jobs[j].sync]
        for job in jobs:
            self._submit(job, t)
        ready = max((self._submitted[job.job_id].end_s for job in jobs), default=t)
        if ready > t:
            self.counters.sync_load_steps += 1
            self.counters.sync_load_wait_s += ready - t
        return ready

    def poll(self, t: float) -> KVConnectorOutput | None:
        """`get_finished` at `t`: the jobs done by then, loads named by request in `finished_recving`."""
        done = sorted((s for s in self._submitted.values() if s.end_s <= t), key=lambda s: s.job.job_id)
        if not done:
            return None
        for s in done:
            del self._submitted[s.job.job_id]
            if s.job.is_store:
                self.counters.stores_finished += 1
            else:
                self.counters.loads_finished += 1
        # A synchronous load's request is running: vLLM names only parked requests in `finished_recving`.
        recving = {s.job.req_id for s in done if not s.job.is_store and not s.job.sync}
        failed = [s.job for s in done if not s.job.is_store and not s.job.sync and self.fail_load(s.job)]
        self.counters.loads_failed += len(failed)
        by_request = self.failure_report == "request"
        return KVConnectorOutput(
            finished_recving=recving or None,
            kv_connector_worker_meta=SimWorkerMeta({s.job.job_id for s in done}),
            failed_recving={job.req_id for job in failed} if by_request else set(),
            invalid_block_ids=set() if by_request else {job.dst_block_ids[0] for job in failed},
        )

    def end_step(self, meta: KVConnectorMetadata | None, forward_end_s: float) -> None:
        """`start_load_kv` after the forward's launch (the load waits for the forward), and
        `wait_for_save`: the step's other stores go out when its forward has written their blocks."""
        if not isinstance(meta, SimTransferMeta):
            return
        for job_id in sorted(meta.load_jobs):
            if not meta.load_jobs[job_id].sync:
                self._submit(meta.load_jobs[job_id], forward_end_s)
        for job_id in sorted(meta.store_jobs):
            if job_id not in meta.jobs_to_flush:
                self._submit(meta.store_jobs[job_id], forward_end_s)

    def pending(self) -> bool:
        return bool(self._submitted)

    def loads_pending(self) -> bool:
        return any(not s.job.is_store for s in self._submitted.values())

    def next_finish_s(self) -> float | None:
        return min((s.end_s for s in self._submitted.values()), default=None)

    def last_finish_s(self, until_s: float | None = None) -> float | None:
        """The last end among the jobs in flight that end by `until_s` (None: all of them)."""
        ends = (s.end_s for s in self._submitted.values() if until_s is None or s.end_s <= until_s)
        return max(ends, default=None)
