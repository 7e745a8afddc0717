"""HTTP primitives for probing a vLLM server: streamed completions, `/metrics` values, what it serves.

`stream_completion` sends token ids to `/v1/completions` with `ignore_eos` (so it runs to `max_tokens`)
and `stream_options.continuous_usage_stats` (so every chunk says how many tokens it carries), and keeps
the arrival time of every token (`flatshare.protocol.sse`, the replay driver's rule).
"""

from __future__ import annotations

import contextlib
import random
import time
from dataclasses import dataclass
from typing import Any

import httpx

from flatshare.errors import InputError
from flatshare.protocol.models import fetch_models, first_card
from flatshare.protocol.prometheus import CACHE_CONFIG, MetricsPage
from flatshare.protocol.prompt_ids import FIRST_ID
from flatshare.protocol.sse import STREAM_OPTIONS, StreamReader
from flatshare.replay.endpoints import normalize_url


@dataclass(frozen=True)
class Streamed:
    """One streamed completion: when it was sent and when each token arrived (perf_counter seconds)."""

    send_s: float
    token_times_s: tuple[float, ...]
    finish_reason: str | None

    @property
    def ttft_s(self) -> float:
        return self.token_times_s[0] - self.send_s

    def steady_gap_s(self, start_s: float, end_s: float) -> tuple[float, int] | None:
        """Mean time per token between the first and last token that arrived in [start_s, end_s], and
        how many gaps that covers; None with fewer than two such tokens."""
        inside = [t for t in self.token_times_s if start_s <= t <= end_s]
        if len(inside) < 2 or inside[-1] <= inside[0]:
            return None
        return (inside[-1] - inside[0]) / (len(inside) - 1), len(inside) - 1


@dataclass(frozen=True)
class ServerInfo:
    """What a vLLM server says about itself: `/v1/models`, `/version` and `vllm:cache_config_info`."""

    url: str
    model: str
    root: str | None
    max_model_len: int
    num_gpu_blocks: int
    block_size: int
    version: str | None
    cache_labels: dict[str, str]

    @property
    def kv_tokens(self) -> int:
        return self.num_gpu_blocks * self.block_size

    @property
    def usable_kv_tokens(self) -> int:
        """Tokens one request may hold: vLLM keeps one block back as the null block."""
        return (self.num_gpu_blocks - 1) * self.block_size

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k != "cache_labels"}


def unique_prompt(rng: random.Random, n: int, vocab_size: int) -> list[int]:
    """`n` random token ids (none of the special ids below `FIRST_ID`), so no probe hits another's
    prefix cache."""
    return [rng.randrange(FIRST_ID, vocab_size) for _ in range(n)]


async def stream_completion(
    client: httpx.AsyncClient,
    info: ServerInfo,
    prompt: list[int],
    max_tokens: int,
    priority: int | None = None,
) -> Streamed:
    """Stream one completion to the end; raises RuntimeError if the server refuses or cuts it."""
    body: dict[str, Any] = {
        "model": info.model,
        "prompt": prompt,
        "max_tokens": max_tokens,
        "ignore_eos": True,
        "temperature": 0,
        "stream": True,
        "stream_options": STREAM_OPTIONS,
    }
    if priority is not None:
        body["priority"] = priority
    reader = StreamReader()
    tally = reader.tally
    send = time.perf_counter()
    async with client.stream("POST", f"{info.url}/v1/completions", json=body) as response:
        if response.status_code != 200:
            text = (await response.aread()).decode(errors="replace")[:300]
            raise RuntimeError(f"probe refused: HTTP {response.status_code}: {text}")
        async for data in response.aiter_bytes():
            reader.feed(data, time.perf_counter())
    if tally.error or not tally.done or len(tally.token_times_s) != max_tokens:
        raise RuntimeError(
            f"probe stream incomplete: {len(tally.token_times_s)}/{max_tokens} tokens, "
            f"error {tally.error!r}, done {tally.done}"
        )
    return Streamed(send, tuple(tally.token_times_s), tally.finish_reason)


async def scrape(client: httpx.AsyncClient, url: str) -> str:
    response = await client.get(f"{url}/metrics")
    response.raise_for_status()
    return response.text


def metric(text: str, name: str) -> float | None:
    """The value of sample `name` in a Prometheus exposition, summed over label sets; None if absent.

    Sum: counters (tokens generated, preemptions) and a histogram's `_sum` / `_count` add up over
    engines to the server's figure; the gauges read here (KV use, waiting) come from the one-engine
    server calibration runs against, where the sum is that engine's value. Raises ValueError when
    the lines of `name` are not Prometheus text."""
    return MetricsPage.parse(text, (name,)).value(name, "sum")


def histogram(text: str, name: str) -> tuple[float, float]:
    """`(sum, count)` of histogram `name` (0, 0 when absent)."""
    page = MetricsPage.parse(text, (name,))
    return page.value(f"{name}_sum", "sum") or 0.0, page.value(f"{name}_count", "sum") or 0.0


def histogram_buckets(text: str, name: str) -> dict[float, float]:
    """Cumulative counts of histogram `name` by bucket bound (`+Inf` as inf), summed over label sets
    (the server's histogram, all engines together)."""
    return MetricsPage.parse(text, (name,)).buckets(name, "sum")


def info_labels(text: str, name: str) -> dict[str, str]:
    """The labels of an info gauge such as `vllm:cache_config_info` (its first label set; empty when
    absent)."""
    found = MetricsPage.parse(text, (name,)).labels(name)
    return found[0] if found else {}


async def server_info(client: httpx.AsyncClient, url: str) -> ServerInfo:
    """Ask the server what it serves and how big its KV cache is; InputError if it cannot say."""
    base = normalize_url(url)
    try:
        card = first_card(await fetch_models(client, base))
        text = await scrape(client, base)
    except (httpx.HTTPError, ValueError, KeyError, IndexError) as exc:
        problem = f"{type(exc).__name__}: {exc}"
        raise InputError(f"endpoint {base}: not a vLLM server that answers ({problem})") from exc
    try:
        labels = info_labels(text, CACHE_CONFIG)
        blocks, block_size = int(labels["num_gpu_blocks"]), int(labels["block_size"])
    except (KeyError, ValueError) as exc:
        raise InputError(f"endpoint {base}: no usable vllm:cache_config_info on /metrics ({exc})") from exc
    version = None
    with contextlib.suppress(httpx.HTTPError, ValueError, KeyError, TypeError):
        version = str((await client.get(f"{base}/version")).json()["version"])
    return ServerInfo(
        base,
        str(card["id"]),
        card.get("root"),
        int(card["max_model_len"]),
        blocks,
        block_size,
        version,
        labels,
    )
