"""Helpers for serve-sim tests: a server on a free loopback port, SSE reading, /metrics scraping."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from flatshare.serve.server import build_sim_app
from flatshare.sim.config import EngineConfig
from flatshare.sim.profile import load_profile
from kit.net import ThreadServer

PROFILE = load_profile()
STEP_S = PROFILE.step_fixed_s


@contextmanager
def sim_server(**config: Any) -> Iterator[str]:
    """Serve a fresh simulated engine with `EngineConfig(**config)`; yields the base URL."""
    app = build_sim_app(EngineConfig(**config), PROFILE, seed=0)
    with ThreadServer(app) as server:
        yield server.url


def scrape(url: str) -> dict[str, float]:
    """Sample name -> value; `vllm:request_success_total` keyed as `...{reason}`."""
    text = httpx.get(f"{url}/metrics", timeout=5).text
    values: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            reason = sample.labels.get("finished_reason")
            values[f"{sample.name}{{{reason}}}" if reason else sample.name] = sample.value
    return values


@dataclass
class Stream:
    """One streamed response: its JSON chunks, when each arrived (s since sending), and [DONE]."""

    chunks: list[dict[str, Any]] = field(default_factory=list)
    times: list[float] = field(default_factory=list)
    done: bool = False

    def pieces(self, chat: bool = False) -> list[tuple[float, str]]:
        """(arrival time, text) of every chunk with a choice."""
        out = []
        for chunk, t in zip(self.chunks, self.times, strict=True):
            if chunk["choices"]:
                choice = chunk["choices"][0]
                out.append((t, choice["delta"].get("content", "") if chat else choice["text"]))
        return out

    def text(self, chat: bool = False) -> str:
        return "".join(text for _, text in self.pieces(chat))


async def stream(client: httpx.AsyncClient, path: str, body: dict[str, Any]) -> Stream:
    """Send a streaming request and read the whole event stream."""
    out = Stream()
    start = time.perf_counter()
    async with client.stream("POST", path, json={**body, "stream": True}) as response:
        assert response.status_code == 200, await response.aread()
        async for line in response.aiter_lines():
            if not line.startswith("data: "):
                continue
            payload = line.removeprefix("data: ")
            if payload == "[DONE]":
                out.done = True
                continue
            out.chunks.append(json.loads(payload))
            out.times.append(time.perf_counter() - start)
    return out
