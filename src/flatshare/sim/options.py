"""Engine settings as the commands take them, turned into an `EngineConfig` in one place.

`flatshare sim`, `serve-sim` and `replay --sim` take the same engine options; their typer defaults are
this dataclass's fields, which are `EngineConfig`'s (`DEFAULT_ENGINE`) except where a command option
means "derive it": `kv_tokens` None (the step-time profile's, as `Setup.kv_tokens` None),
`max_model_len` None (what the KV cache holds, at most `EngineConfig`'s default), `profile` "" (the
shipped default), `make_room` "" (no make-room settings) and `additional_config` "" (none: vLLM's
`--additional-config`, a JSON object).
Pure Python: importing this module imports no vLLM (checking a flatshare scheduler's settings does,
when `build()` runs).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from flatshare import jsonin
from flatshare.errors import InputError
from flatshare.schedulers import BY_ALIAS
from flatshare.sim.config import (
    DEFAULT_ENGINE,
    SCHEDULER_ALIASES,
    SCHEDULER_CONFIG_KEYS,
    EngineConfig,
    fitting_model_len,
)

if TYPE_CHECKING:
    from flatshare.sim.profile import StepTimeProfile


@dataclass(frozen=True)
class EngineOptions:
    """The simulated engine's command-line options, before the profile fills in what they leave None."""

    scheduler: str = DEFAULT_ENGINE.scheduler
    policy: str = DEFAULT_ENGINE.policy
    profile: str = ""
    kv_tokens: int | None = None
    max_num_batched_tokens: int = DEFAULT_ENGINE.max_num_batched_tokens
    max_num_seqs: int = DEFAULT_ENGINE.max_num_seqs
    max_model_len: int | None = None
    block_size: int = DEFAULT_ENGINE.block_size
    cpu_tier_tokens: int = DEFAULT_ENGINE.cpu_tier_tokens
    make_room: str = ""
    additional_config: str = ""

    def build(self) -> tuple[EngineConfig, StepTimeProfile]:
        """The validated engine config and the step-time profile (InputError on a bad value)."""
        from flatshare.sim.profile import DEFAULT_PROFILE, load_profile

        step_profile = load_profile(self.profile or DEFAULT_PROFILE)
        kv = step_profile.default_kv_tokens if self.kv_tokens is None else self.kv_tokens
        config = EngineConfig(
            block_size=self.block_size,
            kv_tokens=kv,
            max_num_batched_tokens=self.max_num_batched_tokens,
            max_num_seqs=self.max_num_seqs,
            policy=self.policy,
            max_model_len=fitting_model_len(kv, self.block_size)
            if self.max_model_len is None
            else self.max_model_len,
            scheduler=self.scheduler,
            additional_config=additional_config(self.scheduler, self.additional_config, self.make_room),
            cpu_tier_tokens=self.cpu_tier_tokens,
        )
        return config, step_profile


def make_room_settings(text: str) -> dict[str, object]:
    """The `--make-room` option's JSON object (InputError unless it is one)."""
    return _json_object("--make-room", text)


def additional_config(scheduler: str, text: str = "", make_room: str = "") -> dict[str, object]:
    """vLLM's `--additional-config` (`text`, a JSON object) with `--make-room`'s settings under
    `make_room`, checked for `scheduler` (`check_scheduler_settings`); InputError in one line."""
    value = _json_object("--additional-config", text) if text else {}
    if make_room:
        if "make_room" in value:
            raise InputError("make-room's settings are given twice: in --make-room and --additional-config")
        value["make_room"] = make_room_settings(make_room)
    check_scheduler_settings(scheduler, value)
    return value


METRICS_CONFIG_KEY = "flatshare_metrics"
"""Where every flatshare scheduler reads its metrics port (`flatshare.scheduler.metrics_config`)."""


def check_scheduler_settings(scheduler: str, additional: dict[str, object]) -> None:
    """For a flatshare scheduler alias: its own section must build its config (unknown keys are errors),
    and another flatshare scheduler's section is an error (it would be ignored). `vllm` reads no flatshare
    section. A dotted class path is not checked: vLLM and other plug-ins may read any key."""
    if scheduler not in SCHEDULER_ALIASES:
        return
    own = SCHEDULER_CONFIG_KEYS.get(scheduler)
    for name, key in SCHEDULER_CONFIG_KEYS.items():
        if key in additional and key != own:
            reads = f"reads {own!r}" if own else "reads no flatshare settings"
            raise InputError(
                f"--additional-config: {key!r} is {name}'s section; --scheduler {scheduler} {reads}"
            )
    if METRICS_CONFIG_KEY in additional:
        from flatshare.scheduler.metrics_config import MetricsConfig  # imports vLLM (the package's)

        if own is None:
            raise InputError(
                f"--additional-config: {METRICS_CONFIG_KEY!r} is served by flatshare's schedulers; "
                f"--scheduler {scheduler} has none"
            )
        try:
            MetricsConfig.from_additional_config(additional)
        except ValueError as exc:
            raise InputError(f"--additional-config: {exc}") from exc
    if own is None or own not in additional:
        return
    config_class = _config_class(scheduler)
    try:
        config_class.from_additional_config(additional)
    except ValueError as exc:
        raise InputError(f"--additional-config: {exc}") from exc


def _config_class(scheduler: str) -> Any:
    """The settings class of a flatshare scheduler alias (importing it imports vLLM)."""
    return BY_ALIAS[scheduler].load_config_class()


def _json_object(option: str, text: str) -> dict[str, object]:
    value = jsonin.loads(text, option)
    if not isinstance(value, dict):
        raise InputError(f"{option}: must be a JSON object")
    return value
