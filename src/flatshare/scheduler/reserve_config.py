"""reserve's settings, read from vLLM's `--additional-config '{"reserve": {...}}'`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from flatshare.scheduler.sections import check_bools, check_int, read_section

RESERVE_CONFIG_KEY = "reserve"


class ReserveConfigError(ValueError):
    """Invalid reserve settings; raised when the scheduler is built, so vLLM fails at start-up."""


@dataclass(frozen=True)
class ReserveConfig:
    """reserve's settings.

    `enabled`: off by default, and then the scheduler behaves exactly as vLLM's.
    `reserve_tokens`: KV kept free for protected requests, in tokens (rounded up to whole blocks of
    vLLM's block size when the scheduler is built). Requests below the protected priority are not given
    blocks that would leave fewer free: a waiting one is not admitted, a running one that needs a block
    is handled as vLLM handles a running request it cannot give a block (preemption).
    `protect_priority`: requests whose priority value is at or below it may use the reserve.
    `allow_untested_vllm`: run on a vLLM version this was not tested against (a warning instead of a
    start-up error); the environment variable FLATSHARE_ALLOW_UNTESTED_VLLM=1 does the same.
    """

    enabled: bool = False
    reserve_tokens: int = 4096
    protect_priority: int = 0
    allow_untested_vllm: bool = False

    def __post_init__(self) -> None:
        error = ReserveConfigError
        check_bools(self, RESERVE_CONFIG_KEY, ("enabled", "allow_untested_vllm"), error)
        check_int(self, RESERVE_CONFIG_KEY, "reserve_tokens", 0, error)
        check_int(self, RESERVE_CONFIG_KEY, "protect_priority", None, error)

    @classmethod
    def from_additional_config(cls, additional: Mapping[str, Any] | None) -> ReserveConfig:
        """Read `additional_config["reserve"]`; absent means disabled. Unknown keys are errors."""
        return read_section(additional, RESERVE_CONFIG_KEY, cls, ReserveConfigError)
