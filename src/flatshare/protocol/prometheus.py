"""Reading a Prometheus text exposition (a vLLM `/metrics` page): one parser, explicit aggregation, and
`parse_load`, a backend's load out of a vLLM page (the gateway's poller, the replay sampler and the
co-location run's last reading all read vLLM through it).

`MetricsPage.parse(text, families)` runs `prometheus_client`'s parser over the page. A vLLM page is
large (histograms with many buckets, tens of kilobytes) and that parser is pure Python, so a caller that
scrapes often names the `families` it needs: only lines starting with one of those names (and their
`# HELP` / `# TYPE` comments) are parsed, at the cost of a cheap `startswith` per line. A malformed
line among those raises `ValueError`.

A server with several engines (data parallel) or label sets exports one sample per label set. How they
combine is the caller's choice, passed as the `rule` (`"max"`, `"mean"` or `"sum"`) at each call site,
because the right answer depends on the question asked: the gateway routes on the fullest engine (max),
the replay sampler records the server's average KV use (mean), counts and counters add up (sum).

vLLM's metric names, once: `KV_USAGE`, `RUNNING`, `WAITING`, `CACHE_CONFIG` and `PREEMPTIONS`. The
preemption counter is registered as `vllm:num_preemptions` (vLLM's `v1/metrics/loggers.py`, and
`flatshare.serve.telemetry`); prometheus_client exposes it as the sample `vllm:num_preemptions_total`
(plus `vllm:num_preemptions_created` unless created series are off), under a `# TYPE` line named
`..._total` in the Prometheus text format or `vllm:num_preemptions` in the OpenMetrics style. The sample
name is the one to read in both; as a line filter it keeps the samples (a `# TYPE` line it drops only
makes the family untyped, not its values) and skips the `_created` timestamp.

`parse_load(text, name, kv_rule)`: KV use (`max` for the gateway: the engine a new request may land on
is as full as the fullest, for all the gateway knows; `mean` for a recorded sample: the share of the
server's cache in use), running and waiting requests and preemptions summed over engines, the KV
capacity from `vllm:cache_config_info`. A page is read only when every value used is a finite number:
`+Inf`, `NaN`, a count below zero or past 2**53, or samples whose sum overflows (two of 1e308) raise
`ScrapeError` (a failed poll), never a reading of 0 (a NaN KV use must not make a backend look
emptiest) and never a value JSON or a /metrics page cannot carry. KV use is clamped to [0, 1].
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Literal

from prometheus_client.parser import text_string_to_metric_families

from flatshare.policy.load import BackendLoad

Rule = Literal["max", "mean", "sum"]

KV_USAGE = "vllm:kv_cache_usage_perc"
RUNNING = "vllm:num_requests_running"
WAITING = "vllm:num_requests_waiting"
PREEMPTIONS = "vllm:num_preemptions_total"
CACHE_CONFIG = "vllm:cache_config_info"
WANTED = (KV_USAGE, RUNNING, WAITING, PREEMPTIONS, CACHE_CONFIG)
"""The families `parse_load` reads (only their lines are parsed)."""
MAX_COUNT = 2.0**53


class ScrapeError(ValueError):
    """The page lacks what a reader of vLLM needs (it may not be a vLLM server), or holds a value that is
    not a finite number."""


def combine(values: Sequence[float], rule: Rule) -> float:
    """`values` (not empty) combined by `rule`: the largest, the mean (`sum / n`) or the sum."""
    if rule == "max":
        return max(values)
    if rule == "mean":
        return sum(values) / len(values)
    return sum(values)


def select_lines(text: str, families: Iterable[str]) -> str:
    """Only the lines of `text` that start with one of `families`, or are their HELP/TYPE comments."""
    names = tuple(families)
    prefixes = names + tuple(f"# {kind} {name}" for kind in ("HELP", "TYPE") for name in names)
    return "\n".join(line for line in text.splitlines() if line.startswith(prefixes)) + "\n"


class MetricsPage:
    """The samples of one exposition, by sample name (a counter's `_total`, a histogram's `_bucket`,
    `_sum` and `_count` keep their suffixes), each a `(labels, value)` pair in page order."""

    def __init__(self, samples: dict[str, list[tuple[dict[str, str], float]]]) -> None:
        self.samples = samples

    @classmethod
    def parse(cls, text: str, families: Iterable[str] | None = None) -> MetricsPage:
        """Parse `text` (only the lines of `families` when given; see the module docstring).

        Raises ValueError when a parsed line is not Prometheus text, or holds an integer too large for a
        float (the parser reads `999...` as an int; `float` of it raises OverflowError). Values may be
        `inf` or `nan` (Prometheus text allows them): a caller that needs finite numbers checks."""
        page = text if families is None else select_lines(text, families)
        samples: dict[str, list[tuple[dict[str, str], float]]] = {}
        for family in text_string_to_metric_families(page):
            for sample in family.samples:
                try:
                    value = float(sample.value)
                except OverflowError as exc:
                    raise ValueError(f"{sample.name}: a value too large for a float") from exc
                samples.setdefault(sample.name, []).append((dict(sample.labels), value))
        return cls(samples)

    def values(self, name: str) -> list[float]:
        """The values of sample `name`, one per label set (empty when absent)."""
        return [value for _, value in self.samples.get(name, ())]

    def value(self, name: str, rule: Rule) -> float | None:
        """Sample `name` combined over its label sets by `rule`; None when absent."""
        values = self.values(name)
        return combine(values, rule) if values else None

    def labels(self, name: str) -> list[dict[str, str]]:
        """The label sets of sample `name` (an info gauge such as `vllm:cache_config_info` says its
        facts in them), in page order."""
        return [labels for labels, _ in self.samples.get(name, ())]

    def buckets(self, histogram: str, rule: Rule) -> dict[float, float]:
        """Cumulative counts of `histogram` by bucket bound (`+Inf` as inf), each bound's counts over
        label sets combined by `rule` (empty when absent)."""
        by_bound: dict[float, list[float]] = {}
        for labels, value in self.samples.get(f"{histogram}_bucket", ()):
            if "le" in labels:
                by_bound.setdefault(float(labels["le"]), []).append(value)
        return {bound: combine(values, rule) for bound, values in by_bound.items()}


def kv_capacity_tokens(labels: dict[str, str]) -> int | None:
    """KV cache size in tokens from `vllm:cache_config_info` labels (`num_gpu_blocks * block_size`);
    None when either label is missing or not an integer."""
    try:
        return int(labels["num_gpu_blocks"]) * int(labels["block_size"])
    except (KeyError, ValueError):
        return None


def parse_load(text: str, name: str = "", kv_rule: Rule = "max") -> BackendLoad:
    """Backend `name`'s load out of a vLLM /metrics page, just read (age 0, not stale), KV use combined
    over engines by `kv_rule` (module docstring); `ScrapeError` without a KV-use gauge or with a value
    that is not finite."""
    try:
        page = MetricsPage.parse(text, WANTED)
    except ValueError as exc:
        raise ScrapeError(f"unparseable metrics: {exc}") from exc
    kv = _finite(page, KV_USAGE, kv_rule)
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
        preemptions=_count(page, PREEMPTIONS),
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
