"""Where a flatshare scheduler serves its Prometheus metrics: vLLM's `--additional-config
'{"flatshare_metrics": {"port": 9464}}'`, read by every flatshare scheduler (make-room, sglang-preempt,
reserve) the same way. Off unless `port` is set. Pure Python: importing this module imports no vLLM.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from flatshare.scheduler.sections import check_int, read_section

METRICS_CONFIG_KEY = "flatshare_metrics"


class MetricsConfigError(ValueError):
    """Invalid metrics settings, or a port that cannot be bound; raised when the scheduler is built, so
    vLLM fails at start-up."""


@dataclass(frozen=True)
class MetricsConfig:
    """The side port of a flatshare scheduler's metrics.

    vLLM's own `/metrics` is served by its API server process, and a scheduler runs in the engine-core
    process, which reports to it only through vLLM's fixed `SchedulerStats` (docs/make-room.md,
    "Metrics"). So the scheduler serves its own Prometheus endpoint, `GET /metrics` on `host:port`.

    `port`: None (the default) serves nothing. With data parallelism each engine core on a host serves on
    `port` + its local data-parallel rank.
    `host`: the address to listen on, 127.0.0.1 by default (loopback: only a Prometheus or sidecar on the
    same host or pod network namespace scrapes it); "0.0.0.0" or "::" to listen on every interface.
    """

    port: int | None = None
    host: str = "127.0.0.1"

    def __post_init__(self) -> None:
        if self.port is not None:
            check_int(self, METRICS_CONFIG_KEY, "port", 1, MetricsConfigError)
            if self.port > 65535:
                raise MetricsConfigError(f"{METRICS_CONFIG_KEY}.port must be <= 65535, got {self.port}")
        try:
            ipaddress.ip_address(self.host)
        except (TypeError, ValueError):
            raise MetricsConfigError(
                f"{METRICS_CONFIG_KEY}.host must be an IP address (127.0.0.1, 0.0.0.0, ::), got {self.host!r}"
            ) from None

    @property
    def enabled(self) -> bool:
        return self.port is not None

    @classmethod
    def from_additional_config(cls, additional: Mapping[str, Any] | None) -> MetricsConfig:
        """Read `additional_config["flatshare_metrics"]`; absent means off. Unknown keys are errors."""
        return read_section(additional, METRICS_CONFIG_KEY, cls, MetricsConfigError)
