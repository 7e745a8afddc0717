"""The protected-KV settings of the CPU tier's connector, read from vLLM's `--kv-transfer-config`.

They live in the connector's extra config under `flatshare_protected` (`kv_connector_extra_config`), read
by flatshare's offloading connector (`flatshare.connector.offloading`) and by the simulated one
(`flatshare.sim.connector`) alike:

    --kv-transfer-config '{"kv_connector": "FlatshareOffloadingConnector",
        "kv_connector_module_path": "flatshare.connector.offloading", "kv_role": "kv_both",
        "kv_connector_extra_config": {"cpu_bytes_to_use": 8589934592,
            "flatshare_protected": {"sync_load": true, "keep_in_tier": true}}}'

Pure Python: importing this module imports no vLLM.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

CONFIG_KEY = "flatshare_protected"


class ProtectedKvConfigError(ValueError):
    """Invalid protected-KV settings; raised when the connector is built, so vLLM fails at start-up."""


@dataclass(frozen=True)
class ProtectedKvConfig:
    """What the CPU tier's connector does for protected requests (priority value at or below
    `protect_priority`, as make-room's setting of that name). Both off by default: the connector is then
    vLLM's `OffloadingConnector` unchanged.

    `sync_load`: a protected request's hit in the CPU tier is loaded inside the step that admits it
    (vLLM's synchronous-load path: `get_num_new_matched_tokens` returns `(hits, False)`, the worker
    loads before the forward) instead of asynchronously (the load starts after the admitting step, is
    polled at the next launch, and the request is scheduled one step after that). The hit then stops
    one token short of the prompt, as vLLM computes at least one token of a scheduled request.
    `keep_in_tier`: blocks a protected request stored, loaded or reused are evicted from the CPU tier
    only when no other block can be (least recently used first within each kind), so a burst of agent
    stores does not push the protected prefix out.
    `keep_preempted`: the blocks a preempted request (of any priority: vLLM's own preemptions and
    make-room's) has in the tier are evicted only after ordinary ones until it is scheduled again or
    ends, so that it comes back by a load rather than by recomputing its prefill.
    `sync_load_preempted`: a preempted request's hit in the CPU tier (of any priority; with
    `keep_preempted` the tier holds it) is loaded inside the step that admits it again, as `sync_load` loads
    a protected one, instead of asynchronously, so it does not sit on all its blocks while the
    asynchronous protocol runs (docs/make-room.md). The load's transfer then delays that step.
    `max_kept_share`: at most this share of the tier is kept or held so; beyond it the least recently used
    such blocks are evicted as ordinary ones (1.0: no limit).
    """

    sync_load: bool = False
    keep_in_tier: bool = False
    keep_preempted: bool = False
    sync_load_preempted: bool = False
    protect_priority: int = 0
    max_kept_share: float = 0.5

    def __post_init__(self) -> None:
        for name in ("sync_load", "keep_in_tier", "keep_preempted", "sync_load_preempted"):
            if not isinstance(getattr(self, name), bool):
                raise ProtectedKvConfigError(
                    f"{CONFIG_KEY}.{name} must be true or false, got {getattr(self, name)!r}"
                )
        priority = self.protect_priority
        if not isinstance(priority, int) or isinstance(priority, bool):
            raise ProtectedKvConfigError(
                f"{CONFIG_KEY}.protect_priority must be an integer, got {priority!r}"
            )
        share = self.max_kept_share
        if not isinstance(share, int | float) or isinstance(share, bool) or not 0 < share <= 1:
            raise ProtectedKvConfigError(f"{CONFIG_KEY}.max_kept_share must be in (0, 1], got {share!r}")

    @property
    def enabled(self) -> bool:
        return self.sync_load or self.keep_in_tier or self.keep_preempted or self.sync_load_preempted

    @property
    def spares(self) -> bool:
        """Whether the tier's eviction spares some blocks (kept or held)."""
        return self.keep_in_tier or self.keep_preempted

    def protects(self, priority: int) -> bool:
        return priority <= self.protect_priority

    def loads_sync(self, priority: int, preempted: bool = False) -> bool:
        """Whether a request of this priority, `preempted` before or not, has its CPU-tier hit loaded inside
        the step (`sync_load` for a protected one, `sync_load_preempted` for a preempted one): never an
        asynchronous load, so vLLM applies no in-flight reservation to its admission."""
        return (self.sync_load and self.protects(priority)) or (self.sync_load_preempted and preempted)

    def loads_request_sync(self, request: Any) -> bool:
        """`loads_sync` for a vLLM `Request` (its `priority`; preempted when `num_preemptions` > 0): the one
        reading the real connector, the simulated one and make-room's admission view share."""
        return self.loads_sync(request.priority, request.num_preemptions > 0)

    @classmethod
    def from_extra_config(cls, extra: Mapping[str, Any] | None) -> ProtectedKvConfig:
        """Read `kv_connector_extra_config["flatshare_protected"]`; absent means off. Unknown keys are errors."""
        section = (extra or {}).get(CONFIG_KEY, {})
        if not isinstance(section, Mapping):
            raise ProtectedKvConfigError(f"kv_connector_extra_config.{CONFIG_KEY} must be a JSON object")
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(section) - known)
        if unknown:
            raise ProtectedKvConfigError(
                f"{CONFIG_KEY}: unknown key(s) {unknown}; valid keys: {sorted(known)}"
            )
        return cls(**dict(section))
