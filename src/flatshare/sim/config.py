"""Engine settings for the simulated engine, mirroring vLLM's own flags."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from flatshare.errors import InputError
from flatshare.schedulers import SCHEDULERS

SCHEDULER_ALIASES = {entry.alias: entry.class_path for entry in SCHEDULERS}
"""Each scheduler alias's `--scheduler-cls` class path (the registry, `flatshare.schedulers`)."""
SCHEDULER_CONFIG_KEYS = {e.alias: e.config_key for e in SCHEDULERS if e.config_key is not None}
"""The `additional_config` key each flatshare scheduler reads its settings from (docs/baselines-engine.md)."""
POLICIES = ("fcfs", "priority")
KV_LOAD_FAILURE_POLICIES = ("fail", "recompute")
FAILURE_REPORTS = ("request", "blocks")
UPPER_BOUNDS = {
    "block_size": 2**12,
    "kv_tokens": 2**24,
    "max_num_batched_tokens": 2**24,
    "max_num_seqs": 2**16,
    "max_model_len": 2**24,
    "cpu_tier_tokens": 2**28,
}
"""The most each size may be, checked before anything is built. Far above any real engine (a 141 GB GPU
holds about a million tokens of an 8B model's KV; vLLM's block sizes are 1-256; its default
`max_num_seqs` 256-1024), low enough that building the engine stays quick: vLLM makes one Python object
per KV block at start, so a 10**19-token cache would never finish starting."""


def check_scheduler_name(name: str) -> None:
    """A scheduler is one of `SCHEDULER_ALIASES` or a dotted class path (module.Class); InputError listing
    the aliases otherwise. Pure: checked with the other settings, before vLLM is imported to load it."""
    if name in SCHEDULER_ALIASES or ("." in name and all(name.split("."))):
        return
    known = ", ".join(repr(a) for a in SCHEDULER_ALIASES)
    raise InputError(f"scheduler {name!r}: not a dotted path (module.Class) nor one of {known}")


def fitting_model_len(kv_tokens: int, block_size: int, cap: int | None = None) -> int:
    """The largest max_model_len vLLM accepts for this KV cache, at most `cap` (default: `EngineConfig`'s
    `max_model_len`): vLLM keeps one block as its null block, so a request can hold
    `(kv_tokens // block_size - 1) * block_size` tokens."""
    limit = DEFAULT_ENGINE.max_model_len if cap is None else cap
    return min(limit, (kv_tokens // block_size - 1) * block_size)


@dataclass(frozen=True)
class EngineConfig:
    """One simulated vLLM engine.

    Each field mirrors a `vllm serve` flag: `block_size` (--block-size), `kv_tokens` (KV capacity in
    tokens; --num-gpu-blocks-override is `kv_tokens // block_size`), `max_num_batched_tokens`,
    `max_num_seqs`, `enable_chunked_prefill`, `enable_prefix_caching`, `policy`
    (--scheduling-policy), `max_model_len`, `scheduler` (--scheduler-cls: an alias of
    `SCHEDULER_ALIASES` or a dotted path) and `additional_config` (--additional-config, where each
    flatshare scheduler reads its settings under its key, `SCHEDULER_CONFIG_KEYS`).
    `cpu_tier_tokens` > 0 turns on the simulated CPU KV tier with that capacity.
    `long_prefill_token_threshold` (--long-prefill-token-threshold): a request's chunk cap per step
    while others run (0: none).
    `scheduler_reserve_full_isl` (--[no-]scheduler-reserve-full-isl, vLLM >= 0.32, PR #37307): a waiting
    request is admitted only when its whole prompt fits in the KV cache (True, vLLM's default) or when
    its first chunk does (False, vLLM's rule before the PR).
    `async_scheduling` (--async-scheduling): the engine schedules each step while the previous one
    runs, and the scheduler is vLLM's `AsyncScheduler` (make-room picks its async variant itself).
    `watermark` (vLLM's `SchedulerConfig.watermark`): the fraction of KV blocks a waiting request's
    admission leaves free while others run (0: none, vLLM's default).
    `max_loras` (--enable-lora --max-loras): LoRA adapters one step may serve (0: LoRA off); a
    request names its adapter with `SimRequest.lora_id`.
    `draft_tokens` (--speculative-config): > 0 runs a parallel drafter (vLLM's draft-model method with
    `parallel_drafting`, as PARD) proposing that many tokens: vLLM charges each scheduled request that
    many extra input slots and keeps lookahead blocks for them. The simulated model proposes no drafts,
    so decoding itself is unchanged; the budget and block rules are vLLM's.
    `kv_load_failure_policy` (--kv-transfer-config's): what vLLM does with a failed CPU-tier load,
    "fail" the request (vLLM's default) or "recompute" it; `cpu_tier_load_failures` the fraction of
    CPU-tier loads that fail (chosen by a hash of the load, so runs repeat), reported as
    `cpu_tier_failure_report`: "request" (`KVConnectorOutput.failed_recving`) or "blocks"
    (`invalid_block_ids`, the load's first block).
    `cpu_tier_connector`: the CPU tier connector's settings beyond its size, as --kv-transfer-config's
    `kv_connector_extra_config` carries them: `flatshare_protected` (`flatshare.connector.config`,
    synchronous loads and a tier that keeps protected blocks). Left out of `to_json` when empty.
    """

    block_size: int = 16
    kv_tokens: int = 40960
    max_num_batched_tokens: int = 512
    max_num_seqs: int = 256
    enable_chunked_prefill: bool = True
    enable_prefix_caching: bool = True
    policy: str = "priority"
    max_model_len: int = 32768
    scheduler: str = "vllm"
    additional_config: Mapping[str, Any] = field(default_factory=dict)
    cpu_tier_tokens: int = 0
    sample_interval_s: float = 0.5
    async_scheduling: bool = False
    long_prefill_token_threshold: int = 0
    scheduler_reserve_full_isl: bool = True
    watermark: float = 0.0
    max_loras: int = 0
    draft_tokens: int = 0
    kv_load_failure_policy: str = "fail"
    cpu_tier_load_failures: float = 0.0
    cpu_tier_failure_report: str = "request"
    cpu_tier_connector: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        positive = ("block_size", "kv_tokens", "max_num_batched_tokens", "max_num_seqs", "max_model_len")
        for name in positive:
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise InputError(f"engine config: {name} must be a positive integer, got {value!r}")
        for name, most in UPPER_BOUNDS.items():
            if getattr(self, name) > most:
                raise InputError(
                    f"engine config: {name} must be at most {most:,}, got {getattr(self, name):,}"
                )
        if self.long_prefill_token_threshold < 0:
            raise InputError("engine config: long_prefill_token_threshold must be >= 0")
        if self.cpu_tier_tokens < 0:
            raise InputError(f"engine config: cpu_tier_tokens must be >= 0, got {self.cpu_tier_tokens}")
        if not 0.0 <= self.watermark < 1.0:
            raise InputError(f"engine config: watermark must be in [0, 1), got {self.watermark!r}")
        if not isinstance(self.max_loras, int) or isinstance(self.max_loras, bool) or self.max_loras < 0:
            raise InputError(f"engine config: max_loras must be an integer >= 0, got {self.max_loras!r}")
        if (
            not isinstance(self.draft_tokens, int)
            or isinstance(self.draft_tokens, bool)
            or not 0 <= self.draft_tokens <= 16
        ):
            raise InputError(
                f"engine config: draft_tokens must be an integer in [0, 16], got {self.draft_tokens!r}"
            )
        if self.kv_load_failure_policy not in KV_LOAD_FAILURE_POLICIES:
            raise InputError(
                f"engine config: kv_load_failure_policy must be one of {KV_LOAD_FAILURE_POLICIES}, "
                f"got {self.kv_load_failure_policy!r}"
            )
        if self.cpu_tier_failure_report not in FAILURE_REPORTS:
            raise InputError(
                f"engine config: cpu_tier_failure_report must be one of {FAILURE_REPORTS}, "
                f"got {self.cpu_tier_failure_report!r}"
            )
        if not 0.0 <= self.cpu_tier_load_failures <= 1.0:
            raise InputError("engine config: cpu_tier_load_failures must be a fraction in [0, 1]")
        if self.sample_interval_s <= 0:
            raise InputError("engine config: sample_interval_s must be > 0")
        check_scheduler_name(self.scheduler)
        if self.policy not in POLICIES:
            raise InputError(f"engine config: policy must be one of {POLICIES}, got {self.policy!r}")
        if self.kv_tokens < self.block_size * 2:
            raise InputError("engine config: kv_tokens must hold at least two blocks")
        if self.max_model_len > fitting_model_len(self.kv_tokens, self.block_size, self.max_model_len):
            raise InputError(
                f"engine config: max_model_len {self.max_model_len} does not fit the KV cache "
                f"({self.num_gpu_blocks} blocks of {self.block_size}, one of them vLLM's null block); "
                "vLLM refuses to start so, lower max_model_len"
            )
        if not self.enable_chunked_prefill and self.max_num_batched_tokens < self.max_model_len:
            raise InputError(
                "engine config: without chunked prefill, max_num_batched_tokens must be >= max_model_len"
            )
        json.dumps(dict(self.additional_config))  # must be JSON, as vLLM's flag is
        _check_connector_settings(self.cpu_tier_connector, self.cpu_tier_tokens)

    @property
    def num_gpu_blocks(self) -> int:
        return self.kv_tokens // self.block_size

    @property
    def scheduler_path(self) -> str:
        """The dotted class path vLLM's --scheduler-cls would take."""
        return SCHEDULER_ALIASES.get(self.scheduler, self.scheduler)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> EngineConfig:
        """Build from a mapping, rejecting unknown keys with the list of valid ones."""
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise InputError(f"engine config: unknown key(s) {unknown}; valid keys: {sorted(known)}")
        return cls(**dict(data))

    def to_json(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["additional_config"] = dict(self.additional_config)
        if self.cpu_tier_connector:
            data["cpu_tier_connector"] = dict(self.cpu_tier_connector)
        else:
            del data["cpu_tier_connector"]  # runs from before the setting read the same
        return data

    def with_changes(self, **changes: Any) -> EngineConfig:
        return dataclasses.replace(self, **changes)


def _check_connector_settings(settings: Mapping[str, Any], cpu_tier_tokens: int) -> None:
    from flatshare.connector.config import CONFIG_KEY, ProtectedKvConfig, ProtectedKvConfigError

    if not isinstance(settings, Mapping):
        raise InputError("engine config: cpu_tier_connector must be a JSON object")
    unknown = sorted(set(settings) - {CONFIG_KEY})
    if unknown:
        raise InputError(
            f"engine config: cpu_tier_connector: unknown key(s) {unknown}; valid: [{CONFIG_KEY!r}]"
        )
    try:
        protected = ProtectedKvConfig.from_extra_config(settings)
    except (ProtectedKvConfigError, TypeError) as exc:
        raise InputError(f"engine config: cpu_tier_connector: {exc}") from exc
    if protected.enabled and cpu_tier_tokens == 0:
        raise InputError(
            f"engine config: cpu_tier_connector.{CONFIG_KEY} needs the CPU tier (cpu_tier_tokens > 0)"
        )


DEFAULT_ENGINE = EngineConfig()
"""Every engine default, read by the commands' options (`flatshare.sim.options`) and by the fidelity
settings: change a default in `EngineConfig`, nowhere else."""
