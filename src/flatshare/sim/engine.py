"""The simulated engine: vLLM's own scheduler on a virtual clock.

Each step calls the real `schedule()`, prices the `SchedulerOutput` with the step-time model,
advances the clock, and feeds `update_from_output()` a fake `ModelRunnerOutput` that samples one
token for every request whose prompt is fully computed (partial prefill chunks sample nothing, as in
vLLM's model runner). Requests may be submitted at any virtual time not before the clock, so a driver
can issue a session's next request when the previous one finishes.

With the CPU tier on (`cpu_tier_tokens`), the engine also plays the tier connector's worker
(`SimOffloadWorker`, see flatshare.sim.connector): loads and stores run on their own host links beside
the steps, each step's output carries the transfers that finished by the step's start
(`ModelRunnerOutput.kv_connector_output`), a step first waits for the stores it must flush, and when
nothing can be scheduled while transfers are in flight the engine idles to the next transfer's end (or
the next arrival) and steps again, as vLLM's engine keeps stepping while requests wait for their KV.
"""

from __future__ import annotations

import dataclasses
import heapq
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from vllm.v1.core.sched.output import SchedulerOutput
from vllm.v1.engine import FinishReason
from vllm.v1.outputs import KVConnectorOutput, ModelRunnerOutput
from vllm.v1.request import Request, RequestStatus

from flatshare.runfiles.samples import EngineSample
from flatshare.runfiles.sim_records import RequestRecord
from flatshare.scheduler.base import FlatshareScheduler
from flatshare.sim.config import EngineConfig
from flatshare.sim.connector import SimCpuTierConnector, SimTransferMeta, TransferJob
from flatshare.sim.kv_ledger import KvLedger, held_by_priority
from flatshare.sim.offload_worker import SimOffloadWorker, failing_fraction
from flatshare.sim.profile import ScheduledWork, StepTimeProfile
from flatshare.sim.requests import SimRequest
from flatshare.sim.step_ledger import StepLedger
from flatshare.sim.vllm_host import RequestFactory, build_scheduler
from flatshare.sim.waits import WaitLedger

WARMUP_LEAD_S = 30.0
"""Virtual seconds before the run at which `SimEngine.warm_up` sends its requests (ample for a few
prefills and their CPU-tier stores)."""


class SimInvariantError(AssertionError):
    """The scheduler broke an invariant the simulator checks at every step."""


class SimStalledError(RuntimeError):
    """Requests remain but the scheduler schedules nothing and no arrival is due."""


@dataclass
class StepReport:
    """What one call of `SimEngine.step()` did."""

    start_s: float
    end_s: float
    scheduled_tokens: int = 0
    scheduled: dict[str, int] = field(default_factory=dict)
    tokens: list[tuple[str, int]] = field(default_factory=list)
    finished: list[str] = field(default_factory=list)
    preempted: list[str] = field(default_factory=list)
    flush_wait_s: float = 0.0
    """Time the step waited, before `start_s`, for stores to the CPU tier it had to flush."""
    sync_load_s: float = 0.0
    """Time the step spent, from `start_s`, loading KV from the CPU tier before its forward (synchronous
    loads of protected requests); `end_s` includes it."""
    sync_loaded: tuple[str, ...] = ()
    """The requests whose KV those loads brought in."""


@dataclass
class SimResult:
    records: list[RequestRecord]
    samples: list[EngineSample]
    steps: int
    virtual_s: float
    preemptions: int
    cpu_loaded_tokens: int
    scheduler_counters: dict[str, Any]
    cpu_tier: dict[str, float] = field(default_factory=dict)
    """The CPU tier's counters (`SimEngine.cpu_tier_counters`); empty without the tier."""


class SimEngine:
    """One simulated vLLM engine. Not thread-safe; drive it from one thread or event loop."""

    def __init__(self, config: EngineConfig, profile: StepTimeProfile) -> None:
        self.config = config
        self.profile = profile
        self.scheduler = build_scheduler(config)
        self._factory = RequestFactory(config.block_size)
        connector = self.scheduler.get_kv_connector()
        self._tier = connector if isinstance(connector, SimCpuTierConnector) else None
        self._worker: SimOffloadWorker | None = None
        if self._tier is not None:
            per_token = profile.load_time(1)  # PCIe is full duplex: stores at the same rate, on their own
            fails = failing_fraction(config.cpu_tier_load_failures)
            self._worker = SimOffloadWorker(per_token, per_token, fails, config.cpu_tier_failure_report)
        self.now = 0.0
        if hasattr(self.scheduler, "metrics_clock"):  # a flatshare scheduler: its metrics on virtual time
            self.scheduler.metrics_clock = lambda: self.now
        self._sentence_ends: dict[str, int] = {}  # request id -> its first sentence's length in tokens
        if hasattr(self.scheduler, "use_clock"):  # make-room's hint windows run on the virtual clock
            self.scheduler.use_clock(lambda: self.now)
        self.steps = 0
        self.preemptions = 0
        self.records: dict[str, RequestRecord] = {}
        self.samples: list[EngineSample] = []
        self._pending: list[tuple[float, int, SimRequest]] = []
        self._seq = 0
        self._next_sample = 0.0
        self._empty_steps = 0
        self._in_flight: tuple[SchedulerOutput, ModelRunnerOutput, StepReport] | None = None
        # After an idle wait nothing has followed yet: (its start, len(samples), _next_sample).
        self._idle_mark: tuple[float, int, float] | None = None
        self.on_step: Callable[[StepReport], None] | None = None
        self.waits = WaitLedger(config.max_num_batched_tokens, config.max_num_seqs)
        self.ledger = StepLedger(profile)  # where the steps' time went; the driver sets its window
        self.kv_ledger = KvLedger()  # where the KV cache went, over the same window

    # -- input -----------------------------------------------------------------------------------
    def submit(self, request: SimRequest) -> None:
        """Queue a request sent at `request.arrival_s`; the engine gets it the profile's `api_latency_s`
        later (its record keeps the time it was sent), and the scheduler at the first step boundary after
        that. A request sent while a step runs (a driver submits it once the step is done) still reaches
        the engine at send + api pass: the front end works while the step runs."""
        if request.id in self.records or self._pending_index(request.id) is not None:
            raise ValueError(f"duplicate request id {request.id!r}")
        arrival = request.arrival_s + self.profile.api_latency_s
        if self._idle_mark is not None and arrival < self.now:
            self._rewind_idle(arrival)
        heapq.heappush(self._pending, (arrival, self._seq, request))
        self._seq += 1

    def warm_up(self, requests: Sequence[SimRequest], lead_s: float = WARMUP_LEAD_S) -> int:
        """Serve `requests` before the run, as a server that has served them once before its traffic
        (`flatshare warmup`): on a fresh engine the clock starts at `-lead_s`, they are all sent then and
        must be done (their CPU-tier stores too) before 0. Their records and the clock go back to a fresh
        engine's, while the caches (vLLM's prefix cache, the CPU tier) keep what they left; the
        scheduler's counters keep what they counted. Returns the steps they took."""
        if self.records or self._pending or self.now != 0.0 or self.steps:
            raise ValueError("warm_up needs a fresh engine (before any request)")
        if not lead_s > 0:
            raise ValueError(f"warm_up: lead_s must be > 0, got {lead_s}")
        self.now = -lead_s
        for request in requests:
            self.submit(dataclasses.replace(request, arrival_s=-lead_s))
        while self.step() is not None:
            pass
        self._drain_transfers(until_s=0.0)
        if self.now > 0 or self._loads_in_flight() or self.scheduler.get_num_unfinished_requests():
            raise ValueError(f"warm-up did not end {lead_s} s before the run (at {self.now:.3f} s)")
        steps = self.steps
        for request in requests:
            del self.records[request.id]
        self.now, self.steps, self.preemptions = 0.0, 0, 0
        return steps

    def fail_loads(self, rule: Callable[[TransferJob], bool]) -> None:
        """Report the CPU-tier loads `rule` picks as failed (in the output that reports them finished),
        instead of the `cpu_tier_load_failures` fraction; for fault tests. Needs the CPU tier."""
        if self._worker is None:
            raise ValueError("fail_loads needs the CPU tier (cpu_tier_tokens > 0)")
        self._worker.fail_load = rule

    def abort(self, request_id: str) -> bool:
        """Abort an unfinished request as vLLM does when its client disconnects: the scheduler finishes it
        with `RequestStatus.FINISHED_ABORTED` (`Scheduler.finish_requests`), freeing its KV blocks. One
        still in the arrival queue is dropped from it. Its record ends now with status `aborted` and
        finish reason `abort`. False when the engine has no unfinished request of that id."""
        record: RequestRecord | None
        i = self._pending_index(request_id)
        if i is not None:
            _, _, spec = self._pending.pop(i)
            heapq.heapify(self._pending)
            record = self.records[spec.id] = _unstarted(spec)
        else:
            record = self.records.get(request_id)
            if record is None or record.status != "running":
                return False
            self.scheduler.finish_requests(request_id, RequestStatus.FINISHED_ABORTED)
        assert record is not None
        record.status, record.finish_reason, record.finish_s = "aborted", "abort", self.now
        return True

    def record(self, request_id: str) -> RequestRecord:
        """The request's record; for one still in the arrival queue (sent, but the run ended before it
        reached the scheduler), the record of a request that never started, which is written as failed
        (`RequestRecord.to_record`). KeyError for an id this engine was never given."""
        record = self.records.get(request_id)
        if record is not None:
            return record
        i = self._pending_index(request_id)
        if i is None:
            raise KeyError(request_id)
        return _unstarted(self._pending[i][2])

    def _pending_index(self, request_id: str) -> int | None:
        """Where the request is in the arrival queue, or None."""
        return next((i for i, (_, _, spec) in enumerate(self._pending) if spec.id == request_id), None)

    def has_work(self) -> bool:
        return (
            bool(self._pending)
            or self.scheduler.get_num_unfinished_requests() > 0
            or self._loads_in_flight()  # an aborted request holds its blocks until its load ends
        )

    def next_arrival_s(self) -> float | None:
        return self._pending[0][0] if self._pending else None

    # -- the loop ----------------------------------------------------------------------------------
    def step(self) -> StepReport | None:
        """Run one engine step, or jump the clock to the next arrival when idle. None when done.

        With `async_scheduling` the engine is pipelined as vLLM's engine core is: each step is
        scheduled while the previous one is still executing (its outputs not yet fed back), so the
        scheduler sees its own placeholders; the report returned is that of the step that completed.
        """
        self._idle_mark = None
        self._admit_arrivals()
        idle = self.scheduler.get_num_unfinished_requests() == 0 and not self._loads_in_flight()
        if idle and self._in_flight is None:
            if not self._pending:
                return None
            self._drain_transfers(until_s=self._pending[0][0])
            return self._idle_until(self._pending[0][0])
        output = self.scheduler.schedule()
        self._check_step(output)
        if self.config.async_scheduling:
            return self._step_pipelined(output)
        if output.total_num_scheduled_tokens == 0:
            return self._empty_step(output)
        report, model_output = self._launch(output)
        self._complete(output, model_output, report)
        return report

    def _launch(self, output: SchedulerOutput) -> tuple[StepReport, ModelRunnerOutput]:
        """Price a scheduled step from the clock's current time; the clock is not moved. CPU-tier loads
        and stores overlap steps; only a flush delays the step's start."""
        work, model_output = self._execute(output)
        start, forward, model_output.kv_connector_output = self._worker_begin(output)
        end = forward + self.profile.step_time(work)
        if self.ledger.counts(start):
            priorities = [self.scheduler.requests[r].priority for r in output.num_scheduled_tokens]
            self.ledger.add(start, work, priorities, forward - start)
        if self.kv_ledger.counts(start):
            self._count_kv(start, end)
        if self._worker is not None:
            self._worker.end_step(output.kv_connector_metadata, end)
        report = StepReport(
            start,
            end,
            output.total_num_scheduled_tokens,
            dict(output.num_scheduled_tokens),
            preempted=sorted(output.preempted_req_ids),
            flush_wait_s=start - self.now,
            sync_load_s=forward - start,
            sync_loaded=_sync_loaded(output),
        )
        return report, model_output

    def _count_kv(self, start: float, end: float) -> None:
        """The KV ledger's step: the blocks every live request holds now (the step scheduled), by priority,
        those of requests waiting for an asynchronous load, and the free ones; read from each KV group's
        manager without side effects."""
        scheduler = self.scheduler
        pool = scheduler.kv_cache_manager.block_pool
        managers = scheduler.kv_cache_manager.coordinator.single_type_managers
        holders: list[tuple[int, list[int]]] = []
        loading: set[int] = set()  # two loading requests may share prefix blocks: counted once
        for rid, request in scheduler.requests.items():
            blocks = [b.block_id for m in managers for b in m.req_to_blocks.get(rid, ()) if not b.is_null]
            holders.append((request.priority, blocks))
            if request.status == RequestStatus.WAITING_FOR_REMOTE_KVS:  # admitted, its load not yet in
                loading.update(blocks)
        waiting = bool(scheduler.waiting) or bool(getattr(scheduler, "kv_holding_waiting", ()))
        total = pool.num_gpu_blocks - 1  # the null block is never free
        free = pool.get_num_free_blocks()
        self.kv_ledger.add(start, end, held_by_priority(holders), free, total, waiting, len(loading))

    def _launch_empty(self, output: SchedulerOutput) -> tuple[StepReport, ModelRunnerOutput]:
        """A step that scheduled nothing: no forward, but the tier's worker still flushes, starts the
        step's loads and reports finished transfers (vLLM's `kv_connector_no_forward`)."""
        start, forward, kv_output = self._worker_begin(output)
        assert forward == start, "a synchronous load's request is scheduled in the step that loads it"
        if self._worker is not None:
            self._worker.end_step(output.kv_connector_metadata, start)
        preempted = sorted(output.preempted_req_ids)
        report = StepReport(start, start, preempted=preempted, flush_wait_s=start - self.now)
        return report, ModelRunnerOutput.with_kv_conn_output_only(kv_output)

    def _worker_begin(self, output: SchedulerOutput) -> tuple[float, float, KVConnectorOutput | None]:
        """When the step starts (after any flush), when its forward can (after its synchronous loads), and
        the transfers finished by then."""
        if self._worker is None:
            return self.now, self.now, None
        meta = output.kv_connector_metadata
        start = self._worker.begin_step(meta, self.now)
        forward = self._worker.start_sync_loads(meta, start)
        return start, forward, self._worker.poll(forward)

    def _loads_in_flight(self) -> bool:
        return self._worker is not None and self._worker.loads_pending()

    def _move_clock(self, t: float) -> None:
        self._sample_until(t)
        self.now = max(self.now, t)

    def _complete(self, output: SchedulerOutput, model_output: ModelRunnerOutput, report: StepReport) -> None:
        """The step has executed: move the clock to its end and feed its outputs back."""
        self._move_clock(report.end_s)
        scheduled = output.num_scheduled_tokens
        # A request holding KV that is no longer loading and still waits: vLLM stopped at it this step.
        holding = any(
            r.status.name != "WAITING_FOR_REMOTE_KVS"
            for r in getattr(self.scheduler, "kv_holding_waiting", ())
        )
        reason = self.waits.not_scheduled_reason(scheduled, len(self.scheduler.running), holding)
        self._apply(output, model_output, report)
        got_tokens = {request_id for request_id, _ in report.tokens}
        gap = "store_flush" if report.flush_wait_s > 0 else "idle"
        loads = dict.fromkeys(report.sync_loaded, report.sync_load_s)
        self.waits.step(
            report.start_s, report.end_s, scheduled, reason, self.scheduler, got_tokens, gap, loads
        )
        self._empty_steps = 0
        self.steps += 1
        if self.on_step is not None:
            self.on_step(report)

    def _step_pipelined(self, output: SchedulerOutput) -> StepReport:
        """Async scheduling: finish the step in flight, then launch `output` (scheduled meanwhile)."""
        in_flight, self._in_flight = self._in_flight, None
        if in_flight is not None:
            self._complete(*in_flight)
        if output.total_num_scheduled_tokens == 0:
            if in_flight is None:
                return self._empty_step(output)
            report, model_output = self._launch_empty(output)
            self._move_clock(report.end_s)
            self._apply(output, model_output, report)
            return in_flight[2]
        report, model_output = self._launch(output)
        self._in_flight = (output, model_output, report)
        return in_flight[2] if in_flight is not None else StepReport(self.now, self.now)

    def run(self, requests: Iterable[SimRequest] = ()) -> SimResult:
        """Submit `requests` and step until every request has finished; check no block leaked."""
        for request in requests:
            self.submit(request)
        while self.step() is not None:
            pass
        self._drain_transfers()
        self._check_drained()
        return self.result()

    def cpu_tier_counters(self) -> dict[str, float]:
        """The CPU tier's counters: loads and stores (jobs, tokens, link seconds), flushes (steps that
        waited, jobs, seconds), tier blocks (stored, hit, evicted, dropped, held now), deferred lookups,
        and `held_requests`: preempted requests whose blocks the tier holds now (`keep_preempted`).
        Empty without the tier."""
        if self._tier is None or self._worker is None:
            return {}
        counters: dict[str, float] = {}
        for source in (self._tier.counters, self._tier.tier.counters, self._worker.counters):
            counters.update(dataclasses.asdict(source))
        counters["tier_blocks"] = len(self._tier.tier)
        counters["held_requests"] = self._tier.tier.held_owners
        return counters

    def result(self) -> SimResult:
        scheduler = self.scheduler
        counters = scheduler.flatshare_counters() if isinstance(scheduler, FlatshareScheduler) else {}
        return SimResult(
            records=sorted(self.records.values(), key=lambda r: (r.arrival_s, r.id)),
            samples=list(self.samples),
            steps=self.steps,
            virtual_s=self.now,
            preemptions=self.preemptions,
            cpu_loaded_tokens=self._tier.loaded_tokens_total if self._tier else 0,
            scheduler_counters=counters,
            cpu_tier=self.cpu_tier_counters(),
        )

    # -- internals ---------------------------------------------------------------------------------
    def _admit_arrivals(self) -> None:
        while self._pending and self._pending[0][0] <= self.now:
            engine_arrival, _, spec = heapq.heappop(self._pending)
            record = RequestRecord(
                spec.id, spec.cls, spec.priority, spec.arrival_s, spec.prompt_tokens, spec.max_tokens
            )
            self.records[spec.id] = record
            self.waits.admit(spec.id, spec.arrival_s, engine_arrival, self.now)
            record.wait_s = self.waits.waits[spec.id]
            request = self._factory.make(spec)
            if spec.first_sentence_tokens is not None:
                self._sentence_ends[spec.id] = spec.first_sentence_tokens
            request.arrival_time = max(spec.arrival_s, self.now)
            self.scheduler.add_request(request)

    def _empty_step(self, output: SchedulerOutput) -> StepReport:
        """A step that scheduled nothing: vLLM runs no model. It may still have preempted (a running
        request that could not grow preempts itself) or reported finished CPU-tier transfers; then the
        next step can make progress. Otherwise the engine idles to the next arrival or transfer end,
        whichever is first (a request sent within that wait and submitted after it rewinds it: `submit`)."""
        report, model_output = self._launch_empty(output)
        self._move_clock(report.end_s)
        self._apply(output, model_output, report)
        if output.preempted_req_ids or model_output.kv_connector_output is not None:
            self._empty_steps = 0
            return report
        self._empty_steps += 1
        finish = self._worker.next_finish_s() if self._worker is not None else None
        wake = min((t for t in (self.next_arrival_s(), finish) if t is not None), default=None)
        if wake is not None:
            mark = (self.now, len(self.samples), self._next_sample)
            idle = self._idle_until(wake)
            self._idle_mark = mark if finish is not None else None
            return idle
        if self._empty_steps > 2:
            raise SimStalledError(f"t={self.now:.3f}s: {self.scheduler.get_request_counts()} stuck")
        return report

    def _idle_until(self, t: float) -> StepReport:
        start = self.now
        self._move_clock(t)
        self.waits.gap(self.now, "idle", self.scheduler)
        return StepReport(start, self.now)

    def _rewind_idle(self, arrival_s: float) -> None:
        """A request submitted after an idle wait for a transfer but due within it: nothing happened in
        the wait after its start, so take the clock back to the request's arrival (not before the wait
        began), as if the driver had submitted it in time. (The wait ledger keeps what it charged.)"""
        assert self._idle_mark is not None
        start, n_samples, next_sample = self._idle_mark
        self._idle_mark = None
        del self.samples[n_samples:]
        self._next_sample = next_sample
        self.now = max(start, arrival_s)
        self._sample_until(self.now)

    def _drain_transfers(self, until_s: float | None = None) -> None:
        """With no request left, vLLM's engine keeps stepping while finished requests are still to be
        passed to the connector or its jobs are in flight (`Scheduler.has_requests`:
        `has_finished_requests`, `has_pending_push_work`): step now for the former, then idle to each
        transfer's end (up to `until_s`) and report it, so the next request finds the tier as vLLM's
        would (its finished requests' blocks made recent, its stores done)."""
        while self._worker is not None:
            if not self.scheduler.finished_req_ids:
                # Nothing happens between these transfers' ends: report them all at the last one.
                finish = self._worker.last_finish_s(until_s)
                if finish is None:
                    return
                self._move_clock(finish)
            output = self.scheduler.schedule()
            self._check_step(output)
            if output.total_num_scheduled_tokens:
                raise SimInvariantError("the scheduler scheduled work after every request had finished")
            report, model_output = self._launch_empty(output)
            self._move_clock(report.end_s)
            self._apply(output, model_output, report)

    def _sample_until(self, t: float) -> None:
        """Record samples for every sampling instant in [now, t) with the current state."""
        while self._next_sample < t:
            running, waiting = self.scheduler.get_request_counts()
            tier_blocks = len(self._tier.tier) if self._tier else 0
            usage = round(self.scheduler.get_kv_cache_usage(), 6)
            sample = EngineSample(
                round(self._next_sample, 6), usage, running, waiting, self.preemptions, tier_blocks
            )
            self.samples.append(sample)
            self._next_sample += self.config.sample_interval_s

    def _execute(self, output: SchedulerOutput) -> tuple[list[ScheduledWork], ModelRunnerOutput]:
        """Price the step's work and make the model runner's output: one token per finished prefill."""
        work: list[ScheduledWork] = []
        req_ids: list[str] = []
        sampled: list[list[int]] = []
        for req_id, n in output.num_scheduled_tokens.items():
            request: Request = self.scheduler.requests[req_id]
            before = request.num_computed_tokens - n
            work.append(ScheduledWork(n, before, is_decode=n == 1 and before == request.num_tokens - 1))
            req_ids.append(req_id)
            done = request.num_computed_tokens >= request.num_tokens
            sampled.append([self._token(request)] if done else [])
            record = self.records[req_id]
            if record.first_scheduled_s is None:
                record.first_scheduled_s = self.now
        model_output = ModelRunnerOutput(
            req_ids=req_ids, req_id_to_index={r: i for i, r in enumerate(req_ids)}, sampled_token_ids=sampled
        )
        return work, model_output

    def _token(self, request: Request) -> int:
        """The token sampled next for `request`: the sentence end where its first sentence ends."""
        end = self._sentence_ends.get(request.request_id)
        if end is not None and request.num_output_tokens == end - 1:
            return SENTENCE_END_TOKEN
        return _fake_token(request)

    def _apply(self, output: SchedulerOutput, model_output: ModelRunnerOutput, report: StepReport) -> None:
        self.preemptions += len(output.preempted_req_ids)
        for req_id in output.preempted_req_ids:
            self.records[req_id].preemptions += 1
        engine_outputs = self.scheduler.update_from_output(output, model_output)
        for outputs in engine_outputs.values():
            for out in outputs.outputs:
                record = self.records[out.request_id]
                if out.new_token_ids:
                    record.token_times_s.extend([self.now] * len(out.new_token_ids))
                    report.tokens.append((out.request_id, len(out.new_token_ids)))
                if out.finish_reason is not None:
                    record.finish_s = self.now
                    # vLLM finishes a request whose KV load failed under the "fail" policy with an error.
                    record.status = "failed" if out.finish_reason == FinishReason.ERROR else "finished"
                    record.finish_reason = str(out.finish_reason)
                    report.finished.append(out.request_id)

    def _check_step(self, output: SchedulerOutput) -> None:
        total = sum(output.num_scheduled_tokens.values())
        free = self.scheduler.kv_cache_manager.block_pool.get_num_free_blocks()
        checks = {
            "scheduled tokens add up": total == output.total_num_scheduled_tokens,
            "token budget respected": total <= self.config.max_num_batched_tokens,
            "max_num_seqs respected": len(self.scheduler.running) <= self.config.max_num_seqs,
            "free blocks within the pool": 0 <= free < self.config.num_gpu_blocks,
        }
        broken = [name for name, ok in checks.items() if not ok]
        if broken:
            raise SimInvariantError(f"step {self.steps} at t={self.now:.3f}s: {', '.join(broken)}")

    def _check_drained(self) -> None:
        free = self.scheduler.kv_cache_manager.block_pool.get_num_free_blocks()
        free += int(getattr(self.scheduler, "pinned_kv_blocks", lambda: 0)())  # make-room's prefix pin
        unfinished = [r.id for r in self.records.values() if r.status not in ("finished", "failed")]
        transfers = 0
        if self._tier is not None and self._worker is not None:
            transfers = (
                self._tier.jobs_in_flight + self._tier.tier.pinned_blocks + int(self._worker.pending())
            )
        if unfinished or free != self.config.num_gpu_blocks - 1 or transfers:
            raise SimInvariantError(
                f"after the run: unfinished {unfinished[:5]}, "
                f"free blocks {free} of {self.config.num_gpu_blocks - 1}, CPU-tier transfers left {transfers}"
            )


SENTENCE_END_TOKEN = 31999
"""The token the simulated model samples to end a reply's first sentence (`SimRequest.first_sentence_tokens`);
`_fake_token` never samples it."""


def _sync_loaded(output: SchedulerOutput) -> tuple[str, ...]:
    """The requests the step loads KV for before its forward (`TransferJob.sync`)."""
    meta = output.kv_connector_metadata
    if not isinstance(meta, SimTransferMeta):
        return ()
    return tuple(sorted({job.req_id for job in meta.load_jobs.values() if job.sync}))


def _fake_token(request: Request) -> int:
    """A deterministic sampled token id that is never EOS-like (ids 0-3 are avoided)."""
    return 4 + (request.num_output_tokens * 7919) % 30000


def _unstarted(spec: SimRequest) -> RequestRecord:
    """The record of a request that has not reached the scheduler."""
    return RequestRecord(
        spec.id, spec.cls, spec.priority, spec.arrival_s, spec.prompt_tokens, spec.max_tokens
    )
