"""Sampling an endpoint's Prometheus `/metrics` into `EngineSample`s while a wall-clock replay runs.

Read from vLLM's metric names (`flatshare.protocol.prometheus`): `vllm:kv_cache_usage_perc` (`kv_usage`,
0-1), `vllm:num_requests_running`, `vllm:num_requests_waiting`, `vllm:num_preemptions_total`. With several
label sets (data-parallel engines) counts are summed and KV use is the mean: a sample stands for the
whole server, as the simulator's one engine does, and with engines of equal size the mean is the share of
the server's KV cache in use (the gateway, which asks where the next request may land, takes the max
instead). `cpu_tier_blocks` is 0 (vLLM exports no such metric). A scrape that fails, is not Prometheus
text or lacks `vllm:kv_cache_usage_perc` gives no sample and is counted in `Sampler.errors`.

Only the lines of those four names are parsed (a vLLM scrape holds hundreds of histogram lines), so
sampling costs the event loop little while it times tokens.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import httpx

from flatshare.protocol.prometheus import KV_USAGE, PREEMPTIONS, RUNNING, WAITING, MetricsPage
from flatshare.runfiles.samples import EngineSample

METRICS = {
    KV_USAGE: "kv_usage",
    RUNNING: "running",
    WAITING: "waiting",
    PREEMPTIONS: "preemptions_total",
}


def parse_metrics(text: str) -> MetricsPage:
    """The `METRICS` samples of a Prometheus text exposition; ValueError if it is not one."""
    return MetricsPage.parse(text, METRICS)


def to_sample(page: MetricsPage, t: float) -> EngineSample | None:
    """The sample at `t`, or None when the KV metric is missing."""
    kv = page.value(KV_USAGE, "mean")
    if kv is None:
        return None

    def total(name: str) -> int:
        return round(page.value(name, "sum") or 0)

    return EngineSample(
        t=round(t, 6),
        kv_usage=round(kv, 6),
        running=total(RUNNING),
        waiting=total(WAITING),
        preemptions_total=total(PREEMPTIONS),
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
