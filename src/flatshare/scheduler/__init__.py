"""make-room: a vLLM v1 scheduler plug-in for latency-critical requests beside heavy ones.

Use it with `vllm serve ... --scheduling-policy priority --scheduler-cls
flatshare.scheduler.MakeRoomScheduler --additional-config '{"make_room": {"enabled": true}}'`
(or `AsyncMakeRoomScheduler` with `--async-scheduling`), or `flatshare sim --scheduler make-room`.
Importing this module imports vLLM.
"""

from __future__ import annotations

from vllm.v1.core.sched.async_scheduler import AsyncScheduler
from vllm.v1.core.sched.scheduler import Scheduler

from flatshare.scheduler.config import MakeRoomConfig, MakeRoomConfigError
from flatshare.scheduler.make_room import MakeRoomCounters, MakeRoomMixin


class MakeRoomScheduler(MakeRoomMixin, Scheduler):
    """vLLM's `Scheduler` with make-room (off unless `make_room.enabled`)."""


class AsyncMakeRoomScheduler(MakeRoomMixin, AsyncScheduler):
    """vLLM's `AsyncScheduler` (for `--async-scheduling`) with make-room."""


__all__ = [
    "AsyncMakeRoomScheduler",
    "MakeRoomConfig",
    "MakeRoomConfigError",
    "MakeRoomCounters",
    "MakeRoomScheduler",
]
