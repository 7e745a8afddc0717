"""The simulated engine: vLLM's own scheduler on a virtual clock.

Each step calls the real `schedule()`, prices the `SchedulerOutput` with the step-time model,
advances the clock, and feeds `update_from_output()` a fake `ModelRunnerOutput` that samples one
token for every request whose prompt is fully computed (partial prefill chunks sample nothing, as in
vLLM's model runner). Requests may be submitted at any virtual time not before the clock, so a driver
can issue a session's next request when the previous one finishes.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from vllm.v1.core.sched.output import SchedulerOutput
from vllm.v1.outputs import EMPTY_MODEL_RUNNER_OUTPUT, ModelRunnerOutput
from vllm.v1.request import Request

from flatshare.sim.config import EngineConfig
from flatshare.sim.connector import SimCpuTierConnector, SimStepLoads
from flatshare.sim.profile import ScheduledWork, StepTimeProfile
from flatshare.sim.records import EngineSample, RequestRecord
from flatshare.sim.requests import SimRequest
from flatshare.sim.vllm_host import RequestFactory, build_scheduler
from flatshare.sim.waits import WaitLedger


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


@dataclass
class SimResult:
    records: list[RequestRecord]
    samples: list[EngineSample]
    steps: int
    virtual_s: float
    preemptions: int
    cpu_loaded_tokens: int
    scheduler_counters: dict[str, Any]


class SimEngine:
    """One simulated vLLM engine. Not thread-safe; drive it from one thread or event loop."""

    def __init__(self, config: EngineConfig, profile: StepTimeProfile) -> None:
        self.config = config
        self.profile = profile
        self.scheduler = build_scheduler(config)
        self._factory = RequestFactory(config.block_size)
        connector = self.scheduler.get_kv_connector()
        self._tier = connector if isinstance(connector, SimCpuTierConnector) else None
        self.now = 0.0
        self.steps = 0
        self.preemptions = 0
        self.records: dict[str, RequestRecord] = {}
        self.samples: list[EngineSample] = []
        self._pending: list[tuple[float, int, SimRequest]] = []
        self._seq = 0
        self._next_sample = 0.0
        self._empty_steps = 0
        self._in_flight: tuple[SchedulerOutput, ModelRunnerOutput, StepReport] | None = None
        self.on_step: Callable[[StepReport], None] | None = None
        self.waits = WaitLedger(config.max_num_batched_tokens, config.max_num_seqs)

    # -- input -----------------------------------------------------------------------------------
    def submit(self, request: SimRequest) -> None:
        """Queue a request sent at `request.arrival_s`; the engine gets it the profile's `api_latency_s`
        later (its record keeps the time it was sent), and the scheduler at the first step boundary after
        that. A request sent while a step runs (a driver submits it once the step is done) still reaches
        the engine at send + api pass: the front end works while the step runs."""
        if request.id in self.records or any(p[2].id == request.id for p in self._pending):
            raise ValueError(f"duplicate request id {request.id!r}")
        arrival = request.arrival_s + self.profile.api_latency_s
        heapq.heappush(self._pending, (arrival, self._seq, request))
        self._seq += 1

    def has_work(self) -> bool:
        return bool(self._pending) or self.scheduler.get_num_unfinished_requests() > 0

    def next_arrival_s(self) -> float | None:
        return self._pending[0][0] if self._pending else None

    # -- the loop ----------------------------------------------------------------------------------
    def step(self) -> StepReport | None:
        """Run one engine step, or jump the clock to the next arrival when idle. None when done.

        With `async_scheduling` the engine is pipelined as vLLM's engine core is: each step is
        scheduled while the previous one is still executing (its outputs not yet fed back), so the
        scheduler sees its own placeholders; the report returned is that of the step that completed.
        """
        self._admit_arrivals()
        if self.scheduler.get_num_unfinished_requests() == 0 and self._in_flight is None:
            if not self._pending:
                return None
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
        """Price a scheduled step from the clock's current time; the clock is not moved."""
        work, model_output = self._execute(output)
        loads = output.kv_connector_metadata
        loaded = loads.tokens if isinstance(loads, SimStepLoads) else 0
        end = self.now + self.profile.step_time(work, loaded)
        report = StepReport(
            self.now,
            end,
            output.total_num_scheduled_tokens,
            dict(output.num_scheduled_tokens),
            preempted=sorted(output.preempted_req_ids),
        )
        return report, model_output

    def _complete(self, output: SchedulerOutput, model_output: ModelRunnerOutput, report: StepReport) -> None:
        """The step has executed: move the clock to its end and feed its outputs back."""
        self._sample_until(report.end_s)
        self.now = report.end_s
        scheduled = output.num_scheduled_tokens
        reason = self.waits.not_scheduled_reason(scheduled, len(self.scheduler.running))
        self._apply(output, model_output, report)
        got_tokens = {request_id for request_id, _ in report.tokens}
        self.waits.step(report.start_s, report.end_s, scheduled, reason, self.scheduler, got_tokens)
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
            self._apply(output, EMPTY_MODEL_RUNNER_OUTPUT, StepReport(self.now, self.now))
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
        self._check_drained()
        return self.result()

    def result(self) -> SimResult:
        counters_fn = getattr(self.scheduler, "make_room_counters", None)
        counters = counters_fn() if callable(counters_fn) else {}
        return SimResult(
            records=sorted(self.records.values(), key=lambda r: (r.arrival_s, r.id)),
            samples=list(self.samples),
            steps=self.steps,
            virtual_s=self.now,
            preemptions=self.preemptions,
            cpu_loaded_tokens=self._tier.loaded_tokens_total if self._tier else 0,
            scheduler_counters=counters,
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
            request.arrival_time = max(spec.arrival_s, self.now)
            self.scheduler.add_request(request)

    def _empty_step(self, output: SchedulerOutput) -> StepReport:
        """A step that scheduled nothing: vLLM runs no model. It may still have preempted (a running
        request that could not grow preempts itself); then the next step makes progress."""
        report = StepReport(self.now, self.now, preempted=sorted(output.preempted_req_ids))
        self._apply(output, EMPTY_MODEL_RUNNER_OUTPUT, report)
        if output.preempted_req_ids:
            self._empty_steps = 0
            return report
        self._empty_steps += 1
        if self._pending:
            return self._idle_until(self._pending[0][0])
        if self._empty_steps > 2:
            raise SimStalledError(f"t={self.now:.3f}s: {self.scheduler.get_request_counts()} stuck")
        return report

    def _idle_until(self, t: float) -> StepReport:
        start = self.now
        self._sample_until(t)
        self.now = max(self.now, t)
        self.waits.gap(self.now, "idle", self.scheduler)
        return StepReport(start, self.now)

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
            sampled.append([_fake_token(request)] if done else [])
            record = self.records[req_id]
            if record.first_scheduled_s is None:
                record.first_scheduled_s = self.now
        model_output = ModelRunnerOutput(
            req_ids=req_ids, req_id_to_index={r: i for i, r in enumerate(req_ids)}, sampled_token_ids=sampled
        )
        return work, model_output

    def _apply(self, output: SchedulerOutput, model_output: ModelRunnerOutput, report: StepReport) -> None:
        self.preemptions += len(output.preempted_req_ids)
        for req_id in output.preempted_req_ids:
            self.records[req_id].preemptions += 1
        if self._tier is not None:
            for req_id in output.num_scheduled_tokens:
                self._tier.save_computed(self.scheduler.requests[req_id])
        engine_outputs = self.scheduler.update_from_output(output, model_output)
        for outputs in engine_outputs.values():
            for out in outputs.outputs:
                record = self.records[out.request_id]
                if out.new_token_ids:
                    record.token_times_s.extend([self.now] * len(out.new_token_ids))
                    report.tokens.append((out.request_id, len(out.new_token_ids)))
                if out.finish_reason is not None:
                    record.finish_s = self.now
                    record.status = "finished"
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
        unfinished = [r.id for r in self.records.values() if r.status != "finished"]
        if unfinished or free != self.config.num_gpu_blocks - 1:
            raise SimInvariantError(
                f"after the run: unfinished {unfinished[:5]}, "
                f"free blocks {free} of {self.config.num_gpu_blocks - 1}"
            )


def _fake_token(request: Request) -> int:
    """A deterministic sampled token id that is never EOS-like (ids 0-3 are avoided)."""
    return 4 + (request.num_output_tokens * 7919) % 30000
