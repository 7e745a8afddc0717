"""What endpoint mode runs (`EndpointPlan`), what it skips and why, and each condition's routing body.

Endpoint mode is the admission experiment against a running flatshare gateway (`endpoint.py`). The plan
lists the synthetic conditions that only change routing, the sage ones when a second gateway fronts
backends that run sage (`sage_gateway`; sage lives in each backend's scheduler and cannot be switched from
outside), the trace cases (only with `trace_s`), and writes `experiment.json`'s plan (`marker`), which the
report reads for what ran where and what was skipped (make-room's conditions always are).
"""

from __future__ import annotations

import dataclasses
import uuid
from dataclasses import dataclass, field
from typing import Any

from flatshare.admission.gatewayclient import GatewayInfo
from flatshare.admission.plan import (
    TRACE_CONDITIONS,
    TRACE_SAGE_CONDITIONS,
    Condition,
    SyntheticPlan,
    TraceCase,
)
from flatshare.admission.synthetic import LONG_FIRST, MAIN
from flatshare.policy.routing import Thresholds
from flatshare.workloads.tokens import DEFAULT_VOCAB, check_vocab

MAKE_ROOM_HOW = (
    "make-room runs inside each backend's scheduler and cannot be switched from outside: start the backends "
    "with `--scheduler-cls flatshare.scheduler.MakeRoomScheduler --additional-config "
    '\'{"make_room": {"enabled": true}}\' --scheduling-policy priority` (serve-sim: `--scheduler make-room '
    "--make-room '{\"enabled\": true}' --policy priority`) and run again into another folder with `--priorities`: its A and B runs are then "
    "the make-room and controller+make-room cells"
)
SAGE_HOW = (
    "sage runs inside each backend's scheduler and cannot be switched from outside: start as many backends "
    "again with `--scheduler-cls flatshare.scheduler.SageScheduler --additional-config "
    '\'{"sage": {"enabled": true, "cap_at_max_tokens": false}}\'` (serve-sim: `--scheduler sage '
    "--additional-config ...`), a second gateway in front of them, and give its URL as `--sage-endpoint`"
)
TRACE_NOT_RUN = (
    "not run: a wall-clock replay of a trace window takes as long as the window; give --trace-seconds S to "
    "replay each window cut to S seconds"
)


@dataclass(frozen=True)
class EndpointPlan:
    """What endpoint mode runs (`endpoint.py`'s docstring). `drain_s`: how long a trace run may go on after its
    last arrival; `idle_timeout_s`: the longest wait for idle backends before a run."""

    gateway: GatewayInfo
    synthetic: SyntheticPlan
    traces: tuple[TraceCase, ...] = ()
    trace_s: float | None = None
    windows: int = 1
    poll_s: float = 0.1
    alone_pause_s: float = 0.3
    drain_s: float = 120.0
    idle_timeout_s: float = 300.0
    read_timeout_s: float = 600.0
    nonce: str = field(default_factory=lambda: uuid.uuid4().hex[:12])
    priorities: bool = False
    vocab_size: int = DEFAULT_VOCAB
    sage_gateway: GatewayInfo | None = None
    """A second gateway whose backends run sage: the sage conditions run through it (None: skipped)."""

    def __post_init__(self) -> None:
        sage = self.sage_gateway
        if sage is not None and sage.url == self.gateway.url:
            raise ValueError(
                "the sage gateway must be another gateway than --endpoint (its backends run sage)"
            )
        if sage is not None and len(sage.backends) != len(self.gateway.backends):
            raise ValueError(
                f"the sage gateway has {len(sage.backends)} backends and --endpoint {len(self.gateway.backends)}: "
                "the conditions compare like with like, give both the same number"
            )
        if self.trace_s is not None and not self.trace_s > 0:
            raise ValueError(f"trace seconds must be > 0, got {self.trace_s}")
        if self.windows < 1 or not self.poll_s > 0 or self.alone_pause_s < 0 or not self.drain_s > 0:
            raise ValueError("windows >= 1, poll_s > 0, alone_pause_s >= 0 and drain_s > 0 are needed")
        check_vocab(self.vocab_size)

    def runs(self, condition: Condition) -> bool:
        """Whether a condition can run: not make-room's; sage's only through a sage gateway."""
        return not condition.make_room and (not condition.sage or self.sage_gateway is not None)

    def gateway_for(self, condition: Condition) -> GatewayInfo:
        """The gateway a condition runs through: the sage gateway for sage's, else `--endpoint`'s."""
        if condition.sage:
            if self.sage_gateway is None:
                raise ValueError(f"condition {condition.key} needs the sage gateway")
            return self.sage_gateway
        return self.gateway

    @property
    def conditions(self) -> tuple[Condition, ...]:
        return tuple(c for c in self.synthetic.conditions if self.runs(c))

    @property
    def skipped(self) -> tuple[Condition, ...]:
        return tuple(c for c in self.synthetic.conditions if not self.runs(c))

    @property
    def trace_conditions(self) -> tuple[Condition, ...]:
        return TRACE_CONDITIONS + (TRACE_SAGE_CONDITIONS if self.sage_gateway is not None else ())

    @property
    def orders(self) -> list[tuple[str, bool]]:
        return [(MAIN, False), (LONG_FIRST, True)] if self.synthetic.long_first else [(MAIN, False)]

    def count_runs(self) -> int:
        synthetic = self.synthetic.seeds * (len(self.orders) * len(self.conditions) + 1)
        traces = len(self.traces) * self.windows * len(self.trace_conditions) if self.trace_s else 0
        return synthetic + traces

    def marker(self) -> dict[str, Any]:
        """`experiment.json`'s plan: the settings, what was skipped and why."""
        return {
            "mode": "endpoint",
            "nonce": self.nonce,
            "priorities": self.priorities,
            "vocab_size": self.vocab_size,
            "endpoint": self.gateway.url,
            "backends": list(self.gateway.backends),
            "model": self.gateway.model,
            "original_routing": self.gateway.routing,
            "sage_endpoint": None if self.sage_gateway is None else self.sage_gateway.url,
            "sage_backends": None if self.sage_gateway is None else list(self.sage_gateway.backends),
            "synthetic": json_safe(dataclasses.asdict(self.synthetic)),
            "trace_s": self.trace_s,
            "windows": self.windows,
            "traces": [c.name for c in self.traces] if self.trace_s else [],
            "skipped": {
                "conditions": [
                    {"key": c.key, "why": SAGE_HOW if c.sage else MAKE_ROOM_HOW} for c in self.skipped
                ],
                "traces": None if self.trace_s else TRACE_NOT_RUN,
            },
        }


def json_safe(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(v) for v in value]
    return value


def routing_change(condition: Condition, thresholds: Thresholds | None) -> dict[str, Any]:
    """The `PUT /gateway/routing` body of a condition."""
    body: dict[str, Any] = {"policy": condition.routing_policy, "prefer": condition.prefer}
    if thresholds is not None:
        body["thresholds"] = {"kv_usage": thresholds.kv_usage, "input_tokens": thresholds.input_tokens}
    return body
