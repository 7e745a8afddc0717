"""A flatshare scheduler's Prometheus endpoint: its counters and the first-token wait of each class.

The counters are read from the scheduler when Prometheus scrapes (a custom collector over the scheduler's
`flatshare_counters()`), so a step pays nothing for them and every counter a scheduler adds is exported
without a change here: `flatshare_<scheduler>_<counter>_total`, for example
`flatshare_make_room_preemptions_for_waiting_total`. The one series a step does write is the histogram
`flatshare_scheduler_first_token_wait_seconds{scheduler, class}`: from a request's arrival to its first
output token, for the protected class (priority at or below the scheduler's protect priority) and the
others. Everything lives in the exporter's own registry, served by prometheus_client's HTTP server on a
daemon thread (text exposition, `GET /metrics`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

from prometheus_client import CollectorRegistry, Histogram, start_http_server
from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector

from flatshare.scheduler.metrics_config import METRICS_CONFIG_KEY, MetricsConfig, MetricsConfigError

FIRST_TOKEN_BUCKETS = (0.025, 0.05, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0, 10.0, 30.0, 60.0)
"""Seconds; fine around a voice turn's budget for its first token (a few tenths of a second)."""

HELP = {
    "preemptions_for_waiting": "Running requests preempted so that a waiting higher-priority one is admitted",
    "preemptions_for_seats": "Running requests preempted for a protected request that waited only for a seat",
    "make_room_events": "Steps in which make-room preempted",
    "declined_insufficient_victims": "Times make-room preempted nobody: max_victims would not free enough",
    "hold_steps": "Steps in which the hold kept lower-priority work out",
    "held_prefill_tokens": "Lower-priority prefill tokens kept out of steps by the hold",
    "held_decode_tokens": "Lower-priority decodes kept out of steps by the hold (hold_decode)",
    "held_waiting_admissions": "Waiting lower-priority requests not admitted in a held step",
    "hold_bound_releases": (
        "Steps in which the hold was released by its guard: max_hold_steps held steps in a row, or one "
        "after a held step that scheduled nothing (empty_hold_steps)"
    ),
    "empty_hold_steps": "Held steps that scheduled nothing (the hold is released the next step)",
    "mispredicted_admissions": "Requests make-room acted for that vLLM then did not admit",
    "async_load_admissions": "Requests make-room acted for that vLLM admitted into an asynchronous KV load",
    "connector_deferred": "Steps in which the KV connector deferred a request make-room acted for",
    "next_step_admissions": "Victims preempted now for a request admitted in the next step (blocks in flight)",
    "stayed_out_unpredictable": "Times make-room stayed out: vLLM's admission of the request is unpredictable",
    "early_promotions": "Requests promoted (finished KV load, compiled grammar) before make-room counted them",
    "hint_wait_steps": (
        "Steps in which an open arrival hint's hold had not started: its turn was due after a chunk "
        "scheduled then would end (flatshare_hint_in_s)"
    ),
    "ahead_releases": (
        "Steps let go by hold_deadline_s: every protected reply in its window was ahead of its deadline"
    ),
}


class CounterCollector(Collector):
    """Every counter of `counters()` (name -> count) as `flatshare_<scheduler>_<name>_total`."""

    def __init__(self, scheduler: str, counters: Callable[[], Mapping[str, int]]) -> None:
        self._scheduler = scheduler
        self._counters = counters

    def collect(self) -> Iterator[Metric]:
        for name, value in self._counters().items():
            help_text = HELP.get(name, f"{self._scheduler} counter {name}")
            yield CounterMetricFamily(f"flatshare_{self._scheduler}_{name}", help_text, value=value)


class SchedulerExporter:
    """One scheduler's registry, first-token histogram and HTTP server; `close()` stops the server."""

    def __init__(self, scheduler: str, counters: Callable[[], Mapping[str, int]]) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.registry.register(CounterCollector(scheduler, counters))
        histogram = Histogram(
            "flatshare_scheduler_first_token_wait_seconds",
            "Seconds from a request's arrival to its first output token, measured in the scheduler",
            ["scheduler", "class"],
            buckets=FIRST_TOKEN_BUCKETS,
            registry=self.registry,
        )
        # both classes present from the start, so a dashboard shows 0 rather than no data
        self._wait = {
            protected: histogram.labels(scheduler, class_label(protected)) for protected in (True, False)
        }
        self.address: tuple[str, int] | None = None
        self._server: Any = None

    def observe_first_token(self, protected: bool, wait_s: float) -> None:
        self._wait[protected].observe(max(wait_s, 0.0))

    def serve(self, config: MetricsConfig, port_offset: int = 0) -> None:
        """Serve on `config.host`:`config.port + port_offset`; MetricsConfigError naming the setting when the
        port cannot be bound (in use, or an address this host does not have)."""
        if config.port is None:
            raise MetricsConfigError(f"{METRICS_CONFIG_KEY}.port is not set")
        port = config.port + port_offset
        try:
            self._server, _thread = start_http_server(port, addr=config.host, registry=self.registry)
        except OSError as exc:
            raise MetricsConfigError(
                f"{METRICS_CONFIG_KEY}: cannot serve metrics on {config.host} port {port}: {exc}"
            ) from exc
        self.address = (config.host, int(self._server.server_port))

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None


def class_label(protected: bool) -> str:
    return "protected" if protected else "other"
