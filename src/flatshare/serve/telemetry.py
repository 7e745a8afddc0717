"""`/metrics` in Prometheus text format, with vLLM's metric names and labels (`model_name`, `engine`).

Gauges (read from the scheduler at scrape time): `vllm:num_requests_running`, `vllm:num_requests_waiting`,
`vllm:kv_cache_usage_perc` (0-1). Counters (updated when a step's tokens are delivered):
`vllm:num_preemptions_total`, `vllm:prompt_tokens_total` (a request's whole prompt, counted at its first
token, as vLLM does), `vllm:generation_tokens_total`, `vllm:prefix_cache_queries_total` /
`vllm:prefix_cache_hits_total` (tokens; what vLLM's scheduler reports each step, new requests only),
`vllm:request_success_total{finished_reason}` (aborts count as `abort`, as in vLLM).
Histogram `vllm:time_to_first_token_seconds` (wall seconds, vLLM's buckets). Info gauge
`vllm:cache_config_info` (vLLM's CacheConfig fields as labels, value 1). Beyond vLLM:
`flatshare:serve_sim_max_lag_seconds`, how late the wall-clock runner has delivered a step at worst.
Every server has its own `CollectorRegistry`, so several can run in one process.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from vllm.v1.engine import FINISH_REASON_STRINGS
from vllm.v1.metrics.buckets import TIME_TO_FIRST_TOKEN_BUCKETS
from vllm.v1.metrics.stats import PrefixCacheStats

from flatshare.sim.engine import SimEngine, StepReport

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
_LABELS = ["model_name", "engine"]


class ServeMetrics:
    """The server's Prometheus metrics; a `StepListener` for the runner."""

    def __init__(self, model_name: str, engine: SimEngine, speed: float = 1.0) -> None:
        self.registry = CollectorRegistry()
        self._values = (model_name, "0")
        self._speed = speed
        self._running = self._gauge(
            "vllm:num_requests_running", "Number of requests in model execution batches."
        )
        self._waiting = self._gauge(
            "vllm:num_requests_waiting", "Number of requests waiting to be processed."
        )
        self._kv_usage = self._gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.")
        self._lag = self._gauge("flatshare:serve_sim_max_lag_seconds", "Worst lateness of a delivered step.")
        self._preemptions = self._counter(
            "vllm:num_preemptions", "Cumulative number of preemption from the engine."
        )
        self._prompt = self._counter("vllm:prompt_tokens", "Number of prefill tokens processed.")
        self._generation = self._counter("vllm:generation_tokens", "Number of generation tokens processed.")
        self._queries = self._counter(
            "vllm:prefix_cache_queries", "Prefix cache queries, in terms of number of queried tokens."
        )
        self._hits = self._counter(
            "vllm:prefix_cache_hits", "Prefix cache hits, in terms of number of cached tokens."
        )
        self._success = Counter(
            "vllm:request_success",
            "Count of successfully processed requests.",
            [*_LABELS, "finished_reason"],
            registry=self.registry,
        )
        for reason in FINISH_REASON_STRINGS:
            self._success.labels(*self._values, reason)
        self._ttft = Histogram(
            "vllm:time_to_first_token_seconds",
            "Histogram of time to first token in seconds.",
            _LABELS,
            registry=self.registry,
            buckets=TIME_TO_FIRST_TOKEN_BUCKETS,
        ).labels(*self._values)
        self._cache_info(engine)
        self._tap_prefix_cache_stats(engine)

    def _gauge(self, name: str, doc: str) -> Gauge:
        return Gauge(name, doc, _LABELS, registry=self.registry).labels(*self._values)

    def _counter(self, name: str, doc: str) -> Counter:
        return Counter(name, doc, _LABELS, registry=self.registry).labels(*self._values)

    def _cache_info(self, engine: SimEngine) -> None:
        info = {
            k: v for k, v in engine.scheduler.cache_config.metrics_info().items() if not k.startswith("_")
        }
        info["engine"] = "0"
        gauge = Gauge(
            "vllm:cache_config_info",
            "Information of the LLMEngine CacheConfig",
            list(info),
            registry=self.registry,
        )
        gauge.labels(**info).set(1)

    def _tap_prefix_cache_stats(self, engine: SimEngine) -> None:
        """Count the prefix-cache stats vLLM drains into each step's `SchedulerStats`.

        `update_from_output()` drains them through the KV manager's `make_prefix_cache_stats()` and
        `SimEngine` drops its return value, so this wraps that method on this engine's manager only.
        """
        manager = engine.scheduler.kv_cache_manager
        drain = manager.make_prefix_cache_stats

        def tapped() -> PrefixCacheStats | None:
            stats = drain()
            if stats is not None:
                self._queries.inc(stats.queries)
                self._hits.inc(stats.hits)
            return stats

        manager.make_prefix_cache_stats = tapped

    # -- StepListener --------------------------------------------------------------------------------
    def on_step(self, report: StepReport, engine: SimEngine) -> None:
        self._preemptions.inc(len(report.preempted))
        for request_id, count in report.tokens:
            self._generation.inc(count)
            record = engine.records[request_id]
            if len(record.token_times_s) == count and record.ttft_s is not None:
                self._prompt.inc(record.prompt_tokens)
                self._ttft.observe(max(0.0, record.ttft_s) / self._speed)
        for request_id in report.finished:
            reason = engine.records[request_id].finish_reason or "stop"
            self._success.labels(*self._values, reason).inc()

    def on_abort(self, request_id: str) -> None:
        self._success.labels(*self._values, "abort").inc()

    # -- scrape ----------------------------------------------------------------------------------------
    def render(self, engine: SimEngine, max_lag_s: float) -> bytes:
        """Set the gauges from the scheduler's current state and render the text format."""
        running, waiting = engine.scheduler.get_request_counts()
        self._running.set(running)
        self._waiting.set(waiting)
        self._kv_usage.set(engine.scheduler.get_kv_cache_usage())
        self._lag.set(max_lag_s)
        return generate_latest(self.registry)
