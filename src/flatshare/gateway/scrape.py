"""Reading the few vLLM metrics a router needs out of a /metrics page (`flatshare.protocol.prometheus`).

Scraped every 100 ms per backend, so only the wanted families are parsed (`WANTED`).

Read: `vllm:kv_cache_usage_perc` (0-1), `vllm:num_requests_running`, `vllm:num_requests_waiting`,
`vllm:num_preemptions_total`, `vllm:cache_config_info` (`block_size`, `num_gpu_blocks` labels). A server
with several engines (data parallel) has one sample per `engine` label. KV use is combined with `max`:
the engine a new request may land on is as full as the fullest, for all the gateway knows, and routing
on the mean would send work to a server whose one engine is already preempting. The counts are summed
(requests running or waiting anywhere on the server, preemptions anywhere).
"""

from __future__ import annotations

from dataclasses import dataclass

from flatshare.protocol.prometheus import (
    CACHE_CONFIG,
    KV_USAGE,
    RUNNING,
    WAITING,
    MetricsPage,
    kv_capacity_tokens,
)

PREEMPTIONS = "vllm:num_preemptions"
WANTED = (KV_USAGE, RUNNING, WAITING, PREEMPTIONS, CACHE_CONFIG)


class ScrapeError(ValueError):
    """The page lacks what the gateway needs (it may not be a vLLM server)."""


@dataclass(frozen=True)
class EngineMetrics:
    """What one scrape of a backend says."""

    kv_usage: float
    running: int
    waiting: int
    preemptions: float
    kv_capacity_tokens: int | None


def parse_metrics(text: str) -> EngineMetrics:
    """The router's view of a vLLM /metrics page; raises `ScrapeError` without a KV-use gauge."""
    try:
        page = MetricsPage.parse(text, WANTED)
    except ValueError as exc:
        raise ScrapeError(f"unparseable metrics: {exc}") from exc
    kv = page.value(KV_USAGE, "max")
    if kv is None:
        raise ScrapeError(f"no {KV_USAGE} on the page (is this a vLLM server?)")
    capacity: int | None = None
    for labels in page.labels(CACHE_CONFIG):
        capacity = kv_capacity_tokens(labels) or capacity
    return EngineMetrics(
        kv_usage=min(1.0, max(0.0, kv)),
        running=int(page.value(RUNNING, "sum") or 0),
        waiting=int(page.value(WAITING, "sum") or 0),
        preemptions=page.value(f"{PREEMPTIONS}_total", "sum") or 0,
        kv_capacity_tokens=capacity,
    )
