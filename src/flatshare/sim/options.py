"""Engine settings as the commands take them, turned into an `EngineConfig` in one place.

`flatshare sim`, `serve-sim` and `replay --sim` take the same engine options; their typer defaults are
this dataclass's fields, which are `EngineConfig`'s (`DEFAULT_ENGINE`) except where a command option
means "derive it": `kv_tokens` 0 (the step-time profile's), `max_model_len` 0 (what the KV cache
holds, at most 32768), `profile` "" (the shipped default) and `make_room` "" (no make-room settings).
Pure Python: importing this module imports no vLLM.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING

from flatshare.errors import InputError
from flatshare.sim.config import DEFAULT_ENGINE, EngineConfig, fitting_model_len

if TYPE_CHECKING:
    from flatshare.sim.profile import StepTimeProfile


@dataclass(frozen=True)
class EngineOptions:
    """The simulated engine's command-line options, before the profile fills in what they leave at 0."""

    scheduler: str = DEFAULT_ENGINE.scheduler
    policy: str = DEFAULT_ENGINE.policy
    profile: str = ""
    kv_tokens: int = 0
    max_num_batched_tokens: int = DEFAULT_ENGINE.max_num_batched_tokens
    max_num_seqs: int = DEFAULT_ENGINE.max_num_seqs
    max_model_len: int = 0
    block_size: int = DEFAULT_ENGINE.block_size
    cpu_tier_tokens: int = DEFAULT_ENGINE.cpu_tier_tokens
    make_room: str = ""

    def build(self) -> tuple[EngineConfig, StepTimeProfile]:
        """The validated engine config and the step-time profile (InputError on a bad value)."""
        from flatshare.sim.profile import DEFAULT_PROFILE, load_profile

        step_profile = load_profile(self.profile or DEFAULT_PROFILE)
        kv = self.kv_tokens or step_profile.default_kv_tokens
        config = EngineConfig(
            block_size=self.block_size,
            kv_tokens=kv,
            max_num_batched_tokens=self.max_num_batched_tokens,
            max_num_seqs=self.max_num_seqs,
            policy=self.policy,
            max_model_len=self.max_model_len or fitting_model_len(kv, self.block_size),
            scheduler=self.scheduler,
            additional_config={"make_room": make_room_settings(self.make_room)} if self.make_room else {},
            cpu_tier_tokens=self.cpu_tier_tokens,
        )
        return config, step_profile


def make_room_settings(text: str) -> dict[str, object]:
    """The `--make-room` option's JSON object (InputError unless it is one)."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(f"--make-room: not valid JSON ({exc.msg})") from exc
    if not isinstance(value, dict):
        raise InputError("--make-room: must be a JSON object")
    return value
