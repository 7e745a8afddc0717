"""The scheduler registry: every scheduler alias flatshare knows, in one place.

The simulator (`flatshare.sim.config`, `flatshare.sim.options`), the command line's `--scheduler` help
(`flatshare.cli.engine_options`), the docs' alias table (docs/baselines-engine.md, checked by a test) and
the schedulers themselves (`flatshare.scheduler.base`: name and settings key) read it. Pure Python:
importing this module imports no vLLM (`flatshare.scheduler` does), so settings can be checked before
vLLM loads.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class SchedulerEntry:
    """One scheduler: `alias` (`flatshare sim --scheduler`), `class_path` (what vLLM's `--scheduler-cls`
    takes), `config_key` (its section of `--additional-config`; None: it reads no flatshare settings)
    and `config_class` (`module:Class` of its settings, None with no key)."""

    alias: str
    class_path: str
    config_key: str | None = None
    config_class: str | None = None

    def load_config_class(self) -> Any:
        """The settings class (importing it imports vLLM, through `flatshare.scheduler`)."""
        if self.config_class is None:
            raise LookupError(f"{self.alias} reads no flatshare settings")
        module, _, name = self.config_class.partition(":")
        return getattr(importlib.import_module(module), name)


SCHEDULERS = (
    SchedulerEntry("vllm", "vllm.v1.core.sched.scheduler.Scheduler"),
    SchedulerEntry(
        "make-room",
        "flatshare.scheduler.MakeRoomScheduler",
        "make_room",
        "flatshare.scheduler.config:MakeRoomConfig",
    ),
    SchedulerEntry(
        "sglang-preempt",
        "flatshare.scheduler.SglangPreemptScheduler",
        "sglang_preempt",
        "flatshare.scheduler.sglang_config:SglangPreemptConfig",
    ),
    SchedulerEntry(
        "reserve",
        "flatshare.scheduler.ReserveScheduler",
        "reserve",
        "flatshare.scheduler.reserve_config:ReserveConfig",
    ),
    SchedulerEntry(
        "sage", "flatshare.scheduler.SageScheduler", "sage", "flatshare.scheduler.sage_config:SageConfig"
    ),
)
"""Stock vLLM first, then flatshare's schedulers (make-room, then the engine-side baselines)."""

BY_ALIAS = {entry.alias: entry for entry in SCHEDULERS}
BY_CONFIG_KEY = {entry.config_key: entry for entry in SCHEDULERS if entry.config_key is not None}
