"""Sampling an endpoint's Prometheus `/metrics` into `EngineSample`s while a wall-clock replay runs.

The page is read by the one vLLM metrics reader, `flatshare.protocol.prometheus.parse_load`, with KV use
the mean over engines: a sample stands for the whole server, as the simulator's one engine does, and
with engines of equal size the mean is the share of the server's KV cache in use (the gateway, which
asks where the next request may land, takes the max instead). Counts are summed. `cpu_tier_blocks` is
0 (vLLM exports no such metric). A scrape that fails, is not Prometheus text, lacks
`vllm:kv_cache_usage_perc` or holds a value that is not finite gives no sample and is counted in
`Sampler.errors`. Only the lines of the families read are parsed (a vLLM scrape holds hundreds of
histogram lines), so sampling costs the event loop little while it times tokens.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import httpx

from flatshare.policy.load import BackendLoad
from flatshare.protocol.prometheus import parse_load
from flatshare.runfiles.samples import EngineSample


def to_sample(load: BackendLoad, t: float) -> EngineSample:
    """The sample at `t` of a server's load (`parse_load(text, kv_rule="mean")`)."""
    return EngineSample(
        t=round(t, 6),
        kv_usage=round(load.kv_usage or 0.0, 6),
        running=load.running,
        waiting=load.waiting,
        preemptions_total=round(load.preemptions),
        cpu_tier_blocks=0,
    )


def read_sample(text: str, t: float) -> EngineSample:
    """The sample at `t` of a /metrics page; `ScrapeError` (a ValueError) when it holds none."""
    return to_sample(parse_load(text, kv_rule="mean"), t)


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
            load = parse_load(response.text, kv_rule="mean")
            sample = to_sample(load, self.now())
        except (httpx.HTTPError, ValueError) as exc:
            self.errors += 1
            self.last_error = f"{type(exc).__name__}: {exc}"
            return None
        self.samples.append(sample)
        return sample
