"""What every flatshare scheduler does the same way on vLLM's v1 scheduler, written once.

`FlatshareScheduler` is the base of each scheduler's mixin (make-room, sglang-preempt, reserve, sage). When
vLLM builds the scheduler it reads the scheduler's section of `--additional-config` into its frozen
config (`sections.read_section`: an unknown key is an error), checks the vLLM version
(`versions.check_vllm_version`) and, when it acts, the vLLM internals the shared view reads
(`vllm_view.missing_internals`); says once that a scheduler which acts only under the priority policy
stays out under fcfs; and keeps the scheduler's counters behind one typed method, `flatshare_counters()`,
which the simulator and the metrics exporter read. Each scheduler's name and `additional_config` key come
from the registry (`flatshare.schedulers`).

One class name for vLLM's two scheduling modes: a scheduler declares its async variant as
`class AsyncX(X, AsyncScheduler)`, and `X(...)` builds `AsyncX` when
`vllm_config.scheduler_config.async_scheduling` is on (vLLM's `--scheduler-cls` names one class).
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any, ClassVar

from vllm.v1.core.sched.async_scheduler import AsyncScheduler
from vllm.v1.core.sched.request_queue import SchedulingPolicy
from vllm.v1.core.sched.scheduler import Scheduler

from flatshare.scheduler.sections import read_section
from flatshare.scheduler.versions import check_vllm_version, installed_vllm_version
from flatshare.scheduler.vllm_view import missing_internals
from flatshare.schedulers import SCHEDULERS, SchedulerEntry

log = logging.getLogger(__name__)


def _async_scheduling(args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    vllm_config = kwargs.get("vllm_config", args[0] if args else None)
    scheduler_config = getattr(vllm_config, "scheduler_config", None)
    return bool(getattr(scheduler_config, "async_scheduling", False))


class FlatshareScheduler(Scheduler):
    """The base of a flatshare scheduler's mixin. A scheduler sets `alias` (its registry entry),
    `config_class` (a frozen dataclass with `enabled` and `allow_untested_vllm`), `config_error` and
    `counters_class` (a dataclass of ints); `acts_under_fcfs` False (the default) keeps it out under
    `--scheduling-policy fcfs` with a warning. After `__init__`: `flatshare_config`, `flatshare_stats`
    and `flatshare_active` (enabled, and allowed to act under vLLM's policy)."""

    alias: ClassVar[str] = ""
    config_class: ClassVar[type[Any]]
    config_error: ClassVar[type[ValueError]]
    counters_class: ClassVar[type[Any]]
    acts_under_fcfs: ClassVar[bool] = False
    _async_variant: ClassVar[type[Any] | None] = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if AsyncScheduler in cls.__bases__ and issubclass(cls.__bases__[0], FlatshareScheduler):
            cls.__bases__[0]._async_variant = cls  # set on the sync class itself: `__new__` reads its own

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        variant = cls.__dict__.get("_async_variant")
        if variant is not None and _async_scheduling(args, kwargs):
            cls = variant
        return object.__new__(cls)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        entry = self.registry_entry()
        assert entry.config_key is not None, f"{entry.alias} reads no settings"
        config = read_section(
            self.vllm_config.additional_config, entry.config_key, self.config_class, self.config_error
        )
        check_vllm_version(
            installed_vllm_version(),
            config.allow_untested_vllm,
            name=entry.alias,
            key=entry.config_key,
            error=self.config_error,
        )
        self.flatshare_config = config
        self.flatshare_stats = self.counters_class()
        priority = self.policy == SchedulingPolicy.PRIORITY
        self.flatshare_active: bool = config.enabled and (priority or self.acts_under_fcfs)
        if config.enabled and not self.flatshare_active:
            log.warning(
                "%s acts only under --scheduling-policy priority; it stays out under fcfs", entry.alias
            )
        missing = missing_internals(self) if self.flatshare_active else []
        if missing:
            raise self.config_error(
                f"{entry.alias}: this vLLM ({installed_vllm_version()}) lacks the scheduler internals "
                f"{missing} that flatshare reads (flatshare.scheduler.vllm_view)"
            )

    @classmethod
    def registry_entry(cls) -> SchedulerEntry:
        """This scheduler's entry in `flatshare.schedulers.SCHEDULERS`."""
        return next(entry for entry in SCHEDULERS if entry.alias == cls.alias)

    def flatshare_counters(self) -> dict[str, int]:
        """What the scheduler did, by counter name (the simulator's `scheduler_counters`, the metrics
        exporter's `flatshare_<key>_<counter>_total`)."""
        return dataclasses.asdict(self.flatshare_stats)

    def flatshare_protect_priority(self) -> int:
        """Requests at or below this priority value are the protected class (vLLM's default priority, 0,
        unless the scheduler says otherwise)."""
        return 0
