"""Reading the few vLLM metrics a router needs out of a /metrics page (`flatshare.protocol.prometheus`).

Scraped every 100 ms per backend, so only the wanted families are parsed (`WANTED`).

Read: `vllm:kv_cache_usage_perc` (0-1), `vllm:num_requests_running`, `vllm:num_requests_waiting`,
`vllm:num_preemptions_total`, `vllm:cache_config_info` (`block_size`, `num_gpu_blocks` labels). A server
with several engines (data parallel) has one sample per `engine` label. KV use is combined with `max`:
the engine a new request may land on is as full as the fullest, for all the gateway knows, and routing
on the mean would send work to a server whose one engine is already preempting. The counts are summed
(requests running or waiting anywhere on the server, preemptions anywhere).

A page is read only when every value the router uses is a finite number: `+Inf`, `NaN`, a count below
zero or past 2**53, or samples whose sum overflows (two of 1e308) make the whole scrape a `ScrapeError` (a failed
poll), never a reading of 0 (a NaN KV use must not make a backend look emptiest) and never a value the
gateway's JSON or its own /metrics cannot carry.
"""

from __future__ import annotations

import math

from flatshare.policy.load import BackendLoad
from flatshare.protocol.prometheus import (
    CACHE_CONFIG,
    KV_USAGE,
    RUNNING,
    WAITING,
    MetricsPage,
    Rule,
    combine,
    kv_capacity_tokens,
)

PREEMPTIONS = "vllm:num_preemptions"
MAX_COUNT = 2.0**53
WANTED = (KV_USAGE, RUNNING, WAITING, PREEMPTIONS, CACHE_CONFIG)


class ScrapeError(ValueError):
    """The page lacks what the gateway needs (it may not be a vLLM server)."""


def parse_metrics(text: str, name: str = "") -> BackendLoad:
    """The router's view of a vLLM /metrics page, as backend `name`'s load just read (age 0, not stale);
    raises `ScrapeError` without a KV-use gauge."""
    try:
        page = MetricsPage.parse(text, WANTED)
    except ValueError as exc:
        raise ScrapeError(f"unparseable metrics: {exc}") from exc
    kv = _finite(page, KV_USAGE, "max")
    if kv is None:
        raise ScrapeError(f"no {KV_USAGE} on the page (is this a vLLM server?)")
    capacity: int | None = None
    for labels in page.labels(CACHE_CONFIG):
        capacity = kv_capacity_tokens(labels) or capacity
    return BackendLoad(
        name,
        kv_usage=min(1.0, max(0.0, kv)),
        running=int(_count(page, RUNNING)),
        waiting=int(_count(page, WAITING)),
        preemptions=_count(page, f"{PREEMPTIONS}_total"),
        kv_capacity_tokens=capacity,
        scrape_age_s=0.0,
        stale=False,
    )


def _finite(page: MetricsPage, name: str, rule: Rule) -> float | None:
    """Sample `name` combined by `rule`; ScrapeError when a value, or the combination, is not finite."""
    values = page.values(name)
    if not values:
        return None
    combined = combine(values, rule)
    if not all(math.isfinite(v) for v in values) or not math.isfinite(combined):
        raise ScrapeError(f"{name} is not a finite number ({_shown(values)}): refusing the whole page")
    return combined


def _count(page: MetricsPage, name: str) -> float:
    """A count (summed over engines; 0 when absent): finite, not negative and below 2**53 (a float holds
    every integer up to there; a server does not run 1e300 requests), else ScrapeError."""
    total = _finite(page, name, "sum") or 0.0
    if not 0 <= total <= MAX_COUNT:
        raise ScrapeError(f"{name} is out of range ({_shown(page.values(name))}): refusing the whole page")
    return total


def _shown(values: list[float]) -> str:
    return ", ".join(repr(v) for v in values[:4]) + (", ..." if len(values) > 4 else "")
