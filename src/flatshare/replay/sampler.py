"""Sampling an endpoint's Prometheus `/metrics` into `EngineSample`s while a wall-clock replay runs.

Read from vLLM's metric names: `vllm:kv_cache_usage_perc` (`kv_usage`, 0-1), `vllm:num_requests_running`,
`vllm:num_requests_waiting`, `vllm:num_preemptions_total`. With several label sets (data-parallel engines)
counts are summed and KV use is averaged. `cpu_tier_blocks` is 0 (vLLM exports no such metric). A scrape
that fails or lacks `vllm:kv_cache_usage_perc` gives no sample and is counted in `Sampler.errors`.

The parser reads only the lines of those four names (a vLLM scrape holds hundreds of histogram lines),
so sampling costs the event loop little while it times tokens.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable

import httpx

from flatshare.sim.records import EngineSample

METRICS = {
    "vllm:kv_cache_usage_perc": "kv_usage",
    "vllm:num_requests_running": "running",
    "vllm:num_requests_waiting": "waiting",
    "vllm:num_preemptions_total": "preemptions_total",
}

_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")


def parse_metrics(text: str) -> dict[str, list[float]]:
    """Values of the `METRICS` names in a Prometheus text exposition, one per label set."""
    values: dict[str, list[float]] = {}
    for line in text.splitlines():
        if not line.startswith("vllm:"):
            continue
        name = _NAME.match(line).group()  # type: ignore[union-attr]  # "vllm:" always matches
        if name not in METRICS:
            continue
        rest = line[len(name) :]
        if rest.startswith("{"):
            rest = rest[rest.rfind("}") + 1 :]
        fields = rest.split()
        try:
            values.setdefault(name, []).append(float(fields[0]))
        except (IndexError, ValueError):
            continue
    return values


def to_sample(values: dict[str, list[float]], t: float) -> EngineSample | None:
    """The sample at `t`, or None when the KV metric is missing."""
    kv = values.get("vllm:kv_cache_usage_perc")
    if not kv:
        return None

    def total(name: str) -> int:
        return round(sum(values.get(name, [])))

    return EngineSample(
        t=round(t, 6),
        kv_usage=round(sum(kv) / len(kv), 6),
        running=total("vllm:num_requests_running"),
        waiting=total("vllm:num_requests_waiting"),
        preemptions_total=total("vllm:num_preemptions_total"),
        cpu_tier_blocks=0,
    )


class Sampler:
    """Scrapes one endpoint every `interval_s` until cancelled; `samples` grows as it goes."""

    def __init__(
        self, client: httpx.AsyncClient, url: str, now: Callable[[], float], interval_s: float = 0.5
    ) -> None:
        if not interval_s > 0:
            raise ValueError(f"interval_s must be > 0, got {interval_s}")
        self.client = client
        self.url = f"{url}/metrics"
        self.now = now
        self.interval_s = interval_s
        self.samples: list[EngineSample] = []
        self.errors = 0
        self.last_error: str | None = None

    async def run(self) -> None:
        next_s = self.now()
        while True:
            await self.scrape()
            next_s += self.interval_s
            delay = next_s - self.now()
            if delay < 0:  # a slow scrape: skip the missed instants rather than bunch up
                next_s = self.now()
            await asyncio.sleep(max(0.0, delay))

    async def scrape(self) -> EngineSample | None:
        try:
            response = await self.client.get(self.url)
            response.raise_for_status()
            sample = to_sample(parse_metrics(response.text), self.now())
            if sample is None:
                raise ValueError("no vllm:kv_cache_usage_perc in /metrics")
        except (httpx.HTTPError, ValueError) as exc:
            self.errors += 1
            self.last_error = f"{type(exc).__name__}: {exc}"
            return None
        self.samples.append(sample)
        return sample
