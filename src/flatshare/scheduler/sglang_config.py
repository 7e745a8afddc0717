"""sglang-preempt's settings, read from vLLM's `--additional-config '{"sglang_preempt": {...}}'`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from flatshare.scheduler.sections import check_bools, check_int, read_section

SGLANG_CONFIG_KEY = "sglang_preempt"
SGLANG_DEFAULT_THRESHOLD = 10
"""SGLang's default `--priority-scheduling-preemption-threshold` (server_args.py, sgl-project/sglang main)."""


class SglangPreemptConfigError(ValueError):
    """Invalid sglang-preempt settings; raised when the scheduler is built, so vLLM fails at start-up."""


@dataclass(frozen=True)
class SglangPreemptConfig:
    """sglang-preempt's settings.

    `enabled`: off by default, and then the scheduler behaves exactly as vLLM's.
    `threshold`: a waiting request may preempt a running one only when the running one's priority value
    exceeds its own by MORE than this (SGLang's `priority_diff > threshold`; vLLM's sign: lower values
    are more important). SGLang's default is 10; with flatshare's default priorities (voice 0, agents
    10) that never fires, so use at most 9 there.
    `allow_untested_vllm`: run on a vLLM version this was not tested against (a warning instead of a
    start-up error); the environment variable FLATSHARE_ALLOW_UNTESTED_VLLM=1 does the same.
    """

    enabled: bool = False
    threshold: int = SGLANG_DEFAULT_THRESHOLD
    allow_untested_vllm: bool = False

    def __post_init__(self) -> None:
        error = SglangPreemptConfigError
        check_bools(self, SGLANG_CONFIG_KEY, ("enabled", "allow_untested_vllm"), error)
        check_int(self, SGLANG_CONFIG_KEY, "threshold", 0, error)

    @classmethod
    def from_additional_config(cls, additional: Mapping[str, Any] | None) -> SglangPreemptConfig:
        """Read `additional_config["sglang_preempt"]`; absent means disabled. Unknown keys are errors."""
        return read_section(additional, SGLANG_CONFIG_KEY, cls, SglangPreemptConfigError)
