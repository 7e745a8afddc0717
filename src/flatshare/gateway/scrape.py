"""Reading the few vLLM metrics a router needs out of a /metrics page (Prometheus text format).

A real vLLM page is large (histograms with many buckets, tens of kilobytes); parsing all of it with
`prometheus_client`'s pure-Python parser every 100 ms would take milliseconds of the event loop from
the requests being proxied. So lines are first filtered by name (cheap `startswith` checks, comments for
the wanted families kept) and only those go through `text_string_to_metric_families`.

Read: `vllm:kv_cache_usage_perc` (0-1), `vllm:num_requests_running`, `vllm:num_requests_waiting`,
`vllm:num_preemptions_total`, `vllm:cache_config_info` (`block_size`, `num_gpu_blocks` labels). A server
with several engines (data parallel) has one sample per `engine` label: KV use is the largest of them
(the engine a new request may land on is as full as the fullest, for all the gateway knows), the counts
are summed.
"""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

KV_USAGE = "vllm:kv_cache_usage_perc"
RUNNING = "vllm:num_requests_running"
WAITING = "vllm:num_requests_waiting"
PREEMPTIONS = "vllm:num_preemptions"
CACHE_CONFIG = "vllm:cache_config_info"
WANTED = (KV_USAGE, RUNNING, WAITING, PREEMPTIONS, CACHE_CONFIG)
_PREFIXES = tuple(name for name in WANTED) + tuple(
    f"# {kind} {name}" for kind in ("HELP", "TYPE") for name in WANTED
)


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


def filter_lines(text: str) -> str:
    """Only the lines of the wanted families (samples, HELP and TYPE)."""
    return "\n".join(line for line in text.splitlines() if line.startswith(_PREFIXES)) + "\n"


def parse_metrics(text: str) -> EngineMetrics:
    """The router's view of a vLLM /metrics page; raises `ScrapeError` without a KV-use gauge."""
    values: dict[str, list[float]] = {name: [] for name in WANTED}
    capacity: int | None = None
    try:
        families = list(text_string_to_metric_families(filter_lines(text)))
    except ValueError as exc:
        raise ScrapeError(f"unparseable metrics: {exc}") from exc
    for family in families:
        for sample in family.samples:
            if sample.name == CACHE_CONFIG:
                capacity = _capacity(sample.labels) or capacity
            elif sample.name.removesuffix("_total") in values:
                values[sample.name.removesuffix("_total")].append(sample.value)
    if not values[KV_USAGE]:
        raise ScrapeError(f"no {KV_USAGE} on the page (is this a vLLM server?)")
    return EngineMetrics(
        kv_usage=min(1.0, max(0.0, max(values[KV_USAGE]))),
        running=int(sum(values[RUNNING])),
        waiting=int(sum(values[WAITING])),
        preemptions=sum(values[PREEMPTIONS]),
        kv_capacity_tokens=capacity,
    )


def _capacity(labels: dict[str, str]) -> int | None:
    try:
        return int(labels["num_gpu_blocks"]) * int(labels["block_size"])
    except (KeyError, ValueError):
        return None
