"""The gateway's own /metrics (prometheus-client, its own registry; every name starts `flatshare_`).

Counters and histograms, updated as requests pass:
- `flatshare_gateway_decisions_total{backend, reason}`: routing decisions (`policies.REASONS`);
  `backend` is `none` for `no_backend`.
- `flatshare_gateway_decision_kv_usage{reason}`: histogram of the *preferred* backend's KV use (0-1)
  at each decision; with `reason="kv_pressure"` it shows what the rule moved away from.
- `flatshare_gateway_input_tokens{class}`: histogram of counted input tokens.
- `flatshare_gateway_upstream_ttft_seconds{class}`: from sending a streaming request upstream to its
  first token event coming back.
- `flatshare_gateway_errors_total{kind}` (`errors.ERROR_KINDS`), `flatshare_gateway_responses_total{code}`,
  `flatshare_gateway_requests_in_flight`, `flatshare_gateway_retries_total`.
- `flatshare_gateway_threshold_kv_usage`, `flatshare_gateway_threshold_input_tokens`: the thresholds in use
  (0 while the policy is not `threshold`; they follow `PUT /gateway/routing`).

With a baseline on (`baseline`, docs/baselines-gateway.md), read from its gate at scrape time:
`flatshare_gateway_baseline_counter{baseline, counter}` (every counter of the gate, 0 until it fires) and
`flatshare_gateway_baseline_held_requests{baseline}` (requests waiting in the gate now).

Read from the backend states at scrape time: `flatshare_gateway_backend_kv_usage{backend}`,
`flatshare_gateway_backend_scrape_age_seconds{backend}`, `flatshare_gateway_backend_healthy{backend}`,
`flatshare_gateway_backend_stale{backend}`, `flatshare_gateway_backend_requests_running{backend}`,
`flatshare_gateway_backend_requests_waiting{backend}`, `flatshare_gateway_backend_degraded{backend}`
(1 while routing avoids it for missing the first-byte timeout).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from flatshare.gateway.backends import BackendPool
from flatshare.gateway.errors import ERROR_KINDS
from flatshare.policy.policies import REASONS
from flatshare.policy.routing import Thresholds

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
TOKEN_BUCKETS = (64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072)
KV_BUCKETS = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.85, 0.9, 0.95, 0.99, 1.0)
TTFT_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 2.0, 3.0, 5.0, 10.0, 20.0, 40.0, 80.0)
NO_BACKEND = "none"


class BackendCollector(Collector):
    """Per-backend gauges computed from the pool when /metrics is scraped (so ages are current)."""

    def __init__(self, pool: BackendPool, clock: Callable[[], float]) -> None:
        self.pool = pool
        self.clock = clock

    def collect(self) -> Iterator[Metric]:
        snapshots = self.pool.snapshots(self.clock())
        rows = {
            "kv_usage": ("KV-cache use the backend reported (0-1).", lambda s: s.kv_usage),
            "scrape_age_seconds": ("Seconds since the backend's last good scrape.", lambda s: s.scrape_age_s),
            "healthy": ("1 while the backend may get new requests.", lambda s: float(s.healthy)),
            "stale": ("1 while the backend's readings are too old to trust.", lambda s: float(s.stale)),
            "requests_running": ("Requests running on the backend.", lambda s: s.running),
            "requests_waiting": ("Requests waiting on the backend.", lambda s: s.waiting),
            "degraded": (
                "1 while the backend gets requests only as a last resort (it missed the first-byte timeout).",
                lambda s: float(s.degraded),
            ),
        }
        for suffix, (doc, read) in rows.items():
            family = GaugeMetricFamily(f"flatshare_gateway_backend_{suffix}", doc, labels=["backend"])
            for snap in snapshots:
                value = read(snap)
                if value is not None:
                    family.add_metric([snap.name], float(value))
            yield family


class BaselineCollector(Collector):
    """A baseline gate's counters and queue, read when /metrics is scraped."""

    def __init__(
        self, name: str, counters: Callable[[], Mapping[str, float]], held: Callable[[], int]
    ) -> None:
        self.name = name
        self.counters = counters
        self.held = held

    def collect(self) -> Iterator[Metric]:
        family = GaugeMetricFamily(
            "flatshare_gateway_baseline_counter",
            "The gateway-side baseline's counters (docs/baselines-gateway.md).",
            labels=["baseline", "counter"],
        )
        for counter, value in self.counters().items():
            family.add_metric([self.name, counter], float(value))
        yield family
        held = GaugeMetricFamily(
            "flatshare_gateway_baseline_held_requests",
            "Requests waiting in the baseline's gate now.",
            labels=["baseline"],
        )
        held.add_metric([self.name], float(self.held()))
        yield held


class GatewayMetrics:
    """Every metric the gateway exports (module docstring)."""

    def __init__(self, pool: BackendPool, clock: Callable[[], float], thresholds: Thresholds | None) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.decisions = Counter(
            "flatshare_gateway_decisions",
            "Routing decisions by backend and reason.",
            ["backend", "reason"],
            registry=r,
        )
        self.decision_kv = Histogram(
            "flatshare_gateway_decision_kv_usage",
            "KV use of the preferred backend when each routing decision was made.",
            ["reason"],
            buckets=KV_BUCKETS,
            registry=r,
        )
        self.input_tokens = Histogram(
            "flatshare_gateway_input_tokens",
            "Input tokens per request.",
            ["class"],
            buckets=TOKEN_BUCKETS,
            registry=r,
        )
        self.ttft = Histogram(
            "flatshare_gateway_upstream_ttft_seconds",
            "Seconds from sending a streaming request upstream to its first token.",
            ["class"],
            buckets=TTFT_BUCKETS,
            registry=r,
        )
        self.errors = Counter(
            "flatshare_gateway_errors", "Requests refused or failed, by kind.", ["kind"], registry=r
        )
        self.responses = Counter(
            "flatshare_gateway_responses", "Responses by HTTP status.", ["code"], registry=r
        )
        self.retries = Counter(
            "flatshare_gateway_retries", "Requests sent to another backend after a failure.", registry=r
        )
        self.in_flight = Gauge(
            "flatshare_gateway_requests_in_flight", "Requests being proxied now.", registry=r
        )
        self.kv_threshold = Gauge(
            "flatshare_gateway_threshold_kv_usage", "KV-use threshold of the rule.", registry=r
        )
        self.token_threshold = Gauge(
            "flatshare_gateway_threshold_input_tokens", "Input-token threshold of the rule.", registry=r
        )
        self.set_thresholds(thresholds)
        for kind in ERROR_KINDS:
            self.errors.labels(kind)
        for state in pool.states:
            for reason in REASONS[:-1]:
                self.decisions.labels(state.name, reason)
        self.decisions.labels(NO_BACKEND, "no_backend")
        r.register(BackendCollector(pool, clock))

        self._children: dict[tuple[str, ...], Any] = {}

    def _child(self, metric: Any, *labels: str) -> Any:
        """`metric.labels(*labels)`, remembered (labels() takes a lock and builds a key each call)."""
        key = (metric._name, *labels)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(*labels)
        return child

    def watch_baseline(
        self, name: str, counters: Callable[[], Mapping[str, float]], held: Callable[[], int]
    ) -> None:
        """Export a baseline gate's counters and queue (module docstring)."""
        self.registry.register(BaselineCollector(name, counters, held))

    def set_thresholds(self, thresholds: Thresholds | None) -> None:
        """The threshold gauges: the rule's thresholds, or 0 and 0 while no threshold rule routes."""
        self.kv_threshold.set(thresholds.kv_usage if thresholds is not None else 0)
        self.token_threshold.set(thresholds.input_tokens if thresholds is not None else 0)

    def error(self, kind: str) -> None:
        self._child(self.errors, kind).inc()

    def response(self, status: int) -> None:
        self._child(self.responses, str(status)).inc()

    def decided(self, backend: str, reason: str, preferred_kv: float | None) -> None:
        self._child(self.decisions, backend, reason).inc()
        if preferred_kv is not None:
            self._child(self.decision_kv, reason).observe(preferred_kv)

    def counted(self, cls: str, tokens: int) -> None:
        self._child(self.input_tokens, cls).observe(tokens)

    def first_token(self, cls: str, seconds: float) -> None:
        self._child(self.ttft, cls).observe(seconds)

    def render(self) -> bytes:
        return generate_latest(self.registry)
