"""A backend's load: the one shape every decision reads (routing policies and gates alike).

The gateway builds it from its pollers' scrapes of a backend's /metrics (`flatshare.gateway.backends`),
the virtual-time driver and the admission experiment's simulated cluster from the simulated engines'
state, the admission experiment's endpoint mode from the gateway's `GET /gateway/backends` rows. Every
field but `name` is a keyword (the shape once came in two field orders).
"""

from __future__ import annotations

import math
from dataclasses import KW_ONLY, dataclass

UNKNOWN_PRESSURE = 1.0
"""The KV use assumed for a backend whose reading is stale or missing: treat what cannot be seen as full."""


@dataclass(frozen=True)
class BackendLoad:
    """A backend's last reading at the moment of a decision.

    Read from the engine: `kv_usage` is `vllm:kv_cache_usage_perc` (0-1; None before the first good
    reading); `running` and `waiting` are `vllm:num_requests_running` / `_waiting`; `preemptions` is
    `vllm:num_preemptions_total`; `kv_capacity_tokens` comes from `vllm:cache_config_info` (None when not
    known). About the reading: `scrape_age_s` is the time since it was taken (inf before the first);
    `stale` says it is too old to trust (a stale backend is still routable, but `pressure` counts it as
    full); `healthy` and `degraded` are the gateway's view of the backend (`flatshare.gateway.backends`);
    `unseen` counts requests sent to the backend after the reading was taken, which it cannot show.
    The defaults describe a backend never read: no reading, infinitely old, stale.
    """

    name: str
    _: KW_ONLY
    kv_usage: float | None = None
    running: int = 0
    waiting: int = 0
    preemptions: float = 0.0
    kv_capacity_tokens: int | None = None
    scrape_age_s: float = math.inf
    stale: bool = True
    healthy: bool = True
    degraded: bool = False
    """It missed the gateway's first-byte timeout lately (`gateway.backends`); routed to only as a last resort."""
    unseen: int = 0

    @property
    def pressure(self) -> float:
        """KV use to decide on: the reading when fresh, else `UNKNOWN_PRESSURE`."""
        if self.stale or self.kv_usage is None:
            return UNKNOWN_PRESSURE
        return self.kv_usage

    @property
    def queue(self) -> float:
        """Waiting requests to decide on: the reading when fresh, else infinity."""
        return math.inf if self.stale else float(self.waiting)
