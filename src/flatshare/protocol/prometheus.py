"""Reading a Prometheus text exposition (a vLLM `/metrics` page): one parser, explicit aggregation.

`MetricsPage.parse(text, families)` runs `prometheus_client`'s parser over the page. A vLLM page is
large (histograms with many buckets, tens of kilobytes) and that parser is pure Python, so a caller that
scrapes often names the `families` it needs: only lines starting with one of those names (and their
`# HELP` / `# TYPE` comments) are parsed, at the cost of a cheap `startswith` per line. A malformed
line among those raises `ValueError`.

A server with several engines (data parallel) or label sets exports one sample per label set. How they
combine is the caller's choice, passed as the `rule` (`"max"`, `"mean"` or `"sum"`) at each call site,
because the right answer depends on the question asked: the gateway routes on the fullest engine (max),
the replay sampler records the server's average KV use (mean), counts and counters add up (sum).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Literal

from prometheus_client.parser import text_string_to_metric_families

Rule = Literal["max", "mean", "sum"]

KV_USAGE = "vllm:kv_cache_usage_perc"
RUNNING = "vllm:num_requests_running"
WAITING = "vllm:num_requests_waiting"
PREEMPTIONS = "vllm:num_preemptions_total"
CACHE_CONFIG = "vllm:cache_config_info"


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
