"""The gateway's routing as explicit state: which policy, its preference and its thresholds, swappable
at run time (`PUT /gateway/routing`, `admin.py`).

`RoutingConfig` is the chosen configuration (frozen, validated); `Routing` pairs it with the pure policy
function `make_policy` builds from it; `RoutingSwitch` holds the current `Routing`. The proxy reads
`switch.current` once per decision, so a change applies to every decision made after it (a request
already sent stays where it is; a retry after a failure is decided under the routing of that moment).
Nothing else is mutable: the policies stay pure functions of (request, snapshots).

`apply_change(current, body)` turns a change request `{"policy", "prefer", "thresholds": {"kv_usage",
"input_tokens"}}` (every key optional) into the new `RoutingConfig`, checking keys, types and values
with the same rules as the config file (`configfile.build`); a bad change raises `InputError` and
leaves the routing as it was.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from flatshare.errors import InputError
from flatshare.gateway.config import GatewayConfig
from flatshare.gateway.configfile import build
from flatshare.policy.policies import Policy, check_routing_names, make_policy
from flatshare.policy.routing import ThresholdConfig, Thresholds

CHANGE_KEYS = ("policy", "prefer", "thresholds")
THRESHOLD_KEYS = ("kv_usage", "input_tokens", "calibrated_from")


@dataclass(frozen=True)
class RoutingConfig:
    """The routing part of the gateway's settings (`policy`, `prefer`, `thresholds`, `seed`)."""

    policy: str
    prefer: str
    thresholds: ThresholdConfig
    seed: int = 0

    def __post_init__(self) -> None:
        check_routing_names(self.policy, self.prefer)

    @classmethod
    def of(cls, config: GatewayConfig) -> RoutingConfig:
        return cls(config.policy, config.prefer, config.thresholds, config.seed)

    @property
    def active_thresholds(self) -> Thresholds | None:
        """The thresholds the policy uses: only the threshold rule has any."""
        return self.thresholds.thresholds() if self.policy == "threshold" else None

    def to_json(self) -> dict[str, Any]:
        return {
            "policy": self.policy,
            "prefer": self.prefer,
            "thresholds": dataclasses.asdict(self.thresholds),
        }


@dataclass(frozen=True)
class Routing:
    """A routing configuration and the policy function built from it."""

    config: RoutingConfig
    policy: Policy

    @classmethod
    def build(cls, config: RoutingConfig) -> Routing:
        policy = make_policy(config.policy, config.active_thresholds, config.prefer, config.seed)
        return cls(config, policy)

    @property
    def thresholds(self) -> Thresholds | None:
        return self.config.active_thresholds


class RoutingSwitch:
    """Holds the gateway's current `Routing`; `set` swaps it whole (one event loop: no lock needed)."""

    def __init__(self, config: RoutingConfig) -> None:
        self.current = Routing.build(config)

    def set(self, config: RoutingConfig) -> Routing:
        self.current = Routing.build(config)
        return self.current


WHERE = "PUT /gateway/routing"


def apply_change(current: RoutingConfig, body: Any) -> RoutingConfig:
    """The routing `body` asks for, on top of `current` (module docstring); InputError when it is bad.

    New thresholds without a `calibrated_from` clear the old one (they no longer come from it).
    """
    if not isinstance(body, dict):
        raise InputError(f"{WHERE}: the body must be a JSON object with any of {', '.join(CHANGE_KEYS)}")
    unknown = sorted(set(body) - set(CHANGE_KEYS))
    if unknown:
        raise InputError(f"{WHERE}: unknown key {', '.join(unknown)} (known: {', '.join(CHANGE_KEYS)})")
    changes: dict[str, Any] = {}
    for key in ("policy", "prefer"):
        if key in body:
            if not isinstance(body[key], str):
                raise InputError(f"{WHERE}: {key} must be a string, got {body[key]!r}")
            changes[key] = body[key]
    if "thresholds" in body:
        given = body["thresholds"]
        if not isinstance(given, dict):
            raise InputError(f"{WHERE}: thresholds must be an object with kv_usage and/or input_tokens")
        merged = dataclasses.asdict(current.thresholds) | {"calibrated_from": ""} | given
        changes["thresholds"] = build(ThresholdConfig, merged, WHERE, "thresholds")
    try:
        return dataclasses.replace(current, **changes)
    except ValueError as exc:
        raise InputError(f"{WHERE}: {exc}") from None
