"""The gateway's settings: frozen dataclasses, validated on construction.

A config file (TOML or JSON, see docs/gateway.md) maps onto `GatewayConfig` key by key; unknown keys are
refused (`configfile.py`). The CLI's options override keys of the same name, so there is one source of
truth. Every check raises `ValueError` naming the field; the loader turns it into an `InputError`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from flatshare.gateway.backendlimits import BackendLimits
from flatshare.gateway.connections import ClientLimits
from flatshare.gateway.discovery import DiscoveryConfig
from flatshare.gateway.upstream import UPSTREAM_CLIENTS
from flatshare.policy.gates import make_settings
from flatshare.policy.policies import check_routing_names
from flatshare.policy.routing import ThresholdConfig

TOKEN_SOURCES = ("backend", "local", "estimate")
_CLASS_NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,31}")  # fullmatch: `$` would let a trailing newline in


def _positive(name: str, value: float) -> None:
    if not value > 0:
        raise ValueError(f"{name} must be > 0, got {value}")


@dataclass(frozen=True)
class BackendConfig:
    """One vLLM (or vLLM-compatible) server; `name` defaults to `host:port` of the URL."""

    url: str
    name: str = ""

    def __post_init__(self) -> None:
        parts = urlsplit(self.url)
        if parts.scheme not in ("http", "https") or not parts.hostname or parts.path not in ("", "/"):
            raise ValueError(f"backend url must look like http://host:port, got {self.url!r}")
        object.__setattr__(self, "url", self.url.rstrip("/"))
        if not self.name:
            object.__setattr__(self, "name", parts.netloc)


@dataclass(frozen=True)
class PollConfig:
    """Scraping each backend's /metrics and /health: every `interval_s`, each try bounded by
    `timeout_s`. No good scrape for `stale_after_s` makes a backend stale; `unhealthy_after_failures`
    failures in a row make it unhealthy (no new requests) until a scrape succeeds again."""

    interval_s: float = 0.1
    timeout_s: float = 0.5
    stale_after_s: float = 0.5
    unhealthy_after_failures: int = 3

    def __post_init__(self) -> None:
        _positive("poll.interval_s", self.interval_s)
        _positive("poll.timeout_s", self.timeout_s)
        if self.stale_after_s < self.interval_s:
            raise ValueError("poll.stale_after_s must be >= poll.interval_s")
        if self.unhealthy_after_failures < 1:
            raise ValueError("poll.unhealthy_after_failures must be >= 1")


@dataclass(frozen=True)
class TokenConfig:
    """How input tokens are counted (see `tokens.py`): `source` is `backend` (its /tokenize),
    `local` (a tokenizer.json file) or `estimate`. The exact count is only asked for when the estimate
    is at least `exact_min_estimate` tokens, so short requests never wait for it."""

    source: str = "backend"
    exact_min_estimate: int = 256
    tokenizer_file: str = ""
    timeout_s: float = 1.0

    def __post_init__(self) -> None:
        if self.source not in TOKEN_SOURCES:
            raise ValueError(f"tokens.source must be one of {', '.join(TOKEN_SOURCES)}, got {self.source!r}")
        if self.exact_min_estimate < 0:
            raise ValueError("tokens.exact_min_estimate must be >= 0")
        _positive("tokens.timeout_s", self.timeout_s)
        if self.source == "local" and not Path(self.tokenizer_file).is_file():
            raise ValueError(
                f"tokens.source local needs tokens.tokenizer_file, a file ({self.tokenizer_file!r})"
            )


@dataclass(frozen=True)
class TenantConfig:
    """API keys of one tenant and the most important vLLM priority it may use (lower runs first):
    a request asking for a lower number than `max_priority` is forwarded with `max_priority`."""

    name: str
    api_keys: tuple[str, ...]
    max_priority: int = 0

    def __post_init__(self) -> None:
        if not _CLASS_NAME.fullmatch(self.name):
            raise ValueError(f"tenant name {self.name!r}: use 1-32 of a-z 0-9 _ -")
        if not self.api_keys or any(len(key) < 8 for key in self.api_keys):
            raise ValueError(f"tenant {self.name}: give api_keys, each at least 8 characters")
        for i, key in enumerate(self.api_keys):
            _check_secret(f"tenant {self.name}: api_keys[{i}]", key)


@dataclass(frozen=True)
class GatewayConfig:
    """Everything the gateway runs with (docs/gateway.md lists every key)."""

    backends: tuple[BackendConfig, ...] = ()
    host: str = "127.0.0.1"
    port: int = 8080
    policy: str = "threshold"
    prefer: str = "round-robin"
    seed: int = 0
    thresholds: ThresholdConfig = field(default_factory=ThresholdConfig)
    poll: PollConfig = field(default_factory=PollConfig)
    tokens: TokenConfig = field(default_factory=TokenConfig)
    tenants: tuple[TenantConfig, ...] = ()
    classes: dict[str, int] = field(default_factory=dict)
    audit_log: str = ""
    max_body_bytes: int = 16 * 1024 * 1024
    connect_timeout_s: float = 2.0
    upstream_timeout_s: float = 600.0
    drain_timeout_s: float = 30.0
    retry_after_s: int = 1
    max_upstream_connections: int = 1024
    upstream_client: str = "auto"
    backend_api_key: str = ""
    admin_token: str = field(default="", repr=False)
    baseline: str = ""
    baseline_settings: dict[str, float | str] = field(default_factory=dict)
    discover: tuple[DiscoveryConfig, ...] = ()
    """DNS names whose addresses are backends too, followed while the gateway runs (discovery.py)."""
    expose_metrics: bool = False
    """With tenants: let anyone read /metrics (a Prometheus scrape without a token; access.py)."""
    expose_status: bool = False
    """With tenants: let anyone read /metrics, /gateway/backends and GET /gateway/routing (access.py)."""
    # -- what a backend may send (the backend-facing side) --
    backend_limits: BackendLimits = field(default_factory=BackendLimits)
    """Bounds on backends' answers and silence: page and event sizes, the first-byte timeout (backendlimits.py)."""
    # -- client-facing limits (connections.py; docs/gateway.md, "Security model") --
    clients: ClientLimits = field(default_factory=ClientLimits)
    """Header size and time, body time, keep-alive, connections per address, sessions, answer size."""

    def __post_init__(self) -> None:
        if not self.backends and not self.discover:
            raise ValueError("give at least one backend (backends or discover in the file, or --backend URL)")
        _unique("backend name", [b.name for b in self.backends])
        check_routing_names(self.policy, self.prefer)
        if not 0 <= self.port <= 65535:
            raise ValueError(f"port must lie in 0..65535, got {self.port}")
        _unique("tenant name", [t.name for t in self.tenants])
        _unique("api key", [key for t in self.tenants for key in t.api_keys], secret=True)
        for name in self.classes:
            if not _CLASS_NAME.fullmatch(name) or name == "default":
                raise ValueError(f"class name {name!r}: use 1-32 of a-z 0-9 _ - (not 'default')")
        for name in ("max_body_bytes", "connect_timeout_s", "upstream_timeout_s", "max_upstream_connections"):
            _positive(name, getattr(self, name))
        if self.upstream_client not in UPSTREAM_CLIENTS:
            raise ValueError(
                f"upstream_client must be one of {', '.join(UPSTREAM_CLIENTS)}, got {self.upstream_client!r}"
            )
        if self.upstream_client == "native" and any(not b.url.startswith("http://") for b in self.backends):
            raise ValueError(
                "upstream_client native speaks plain http:// only; use httpx (or auto) for https"
            )
        if self.admin_token and (len(self.admin_token) < 16 or not self.admin_token.isprintable()):
            raise ValueError(
                "admin_token must be at least 16 printable characters (or empty: admin routes off)"
            )
        if self.admin_token:
            _check_secret("admin_token", self.admin_token)
        if self.backend_api_key:
            _check_secret("backend_api_key", self.backend_api_key)
        if self.drain_timeout_s < 0 or self.retry_after_s < 0:
            raise ValueError("drain_timeout_s and retry_after_s must be >= 0")
        if self.baseline:
            make_settings(self.baseline, self.baseline_settings)  # validates (docs/baselines-gateway.md)
        elif self.baseline_settings:
            raise ValueError("baseline_settings given without a baseline (set baseline)")

    @property
    def open(self) -> bool:
        """No tenants: any client may call, with any priority."""
        return not self.tenants


def _check_secret(what: str, value: str) -> None:
    """A key or token a client must send in `Authorization: Bearer <value>`: printable ASCII without
    spaces, since a header value loses its surrounding whitespace and such a key could never match.
    The message never shows the value."""
    if not value or not all("!" <= c <= "~" for c in value):
        raise ValueError(f"{what} must be printable ASCII without spaces or surrounding whitespace")


def _unique(what: str, values: list[str], secret: bool = False) -> None:
    seen: set[str] = set()
    for value in values:
        if value in seen:
            shown = f"{value[:4]}..." if secret else value
            raise ValueError(f"{what} {shown!r} appears twice")
        seen.add(value)
