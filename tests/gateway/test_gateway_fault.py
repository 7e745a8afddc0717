"""A backend killed by its pid in the middle of a run: every request completes or gets an explicit
error, none is lost, and routing moves to the live backend."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from collections import Counter
from dataclasses import dataclass

import httpx
import pytest
from gatewaykit import backend_rows, gateway_config, running_gateway, scrape, sim_backends

from kit.net import serve_sim_processes, wait_for

pytestmark = pytest.mark.vllm

REQUESTS = 48
WORKERS = 6
MAX_TOKENS = 30


@dataclass
class Outcome:
    """How one request ended, as its client saw it."""

    backend: str
    sent_at: float
    tokens: int = 0
    done: bool = False
    error: str = ""
    status: int = 200


async def one(client: httpx.AsyncClient, started: float) -> Outcome:
    body = {
        "model": "sim",
        "prompt": "tell me a story about the river",
        "max_tokens": MAX_TOKENS,
        "stream": True,
    }
    sent = time.monotonic() - started
    async with client.stream("POST", "/v1/completions", json=body) as response:
        outcome = Outcome(
            response.headers.get("x-flatshare-backend", "none"), sent, status=response.status_code
        )
        if response.status_code != 200:
            outcome.error = json.loads(await response.aread())["error"]["message"]
            return outcome
        async for line in response.aiter_lines():
            if not line.startswith("data: "):
                continue
            payload = line.removeprefix("data: ")
            if payload == "[DONE]":
                outcome.done = True
            elif "error" in (event := json.loads(payload)):
                outcome.error = event["error"]["message"]
            else:
                outcome.tokens += 1
    return outcome


async def run(url: str, kill: asyncio.Event) -> list[Outcome]:
    outcomes: list[Outcome] = []
    queue: asyncio.Queue[int] = asyncio.Queue()
    for i in range(REQUESTS):
        queue.put_nowait(i)
    started = time.monotonic()

    async def worker(client: httpx.AsyncClient) -> None:
        while not queue.empty():
            index = queue.get_nowait()
            if index == REQUESTS // 3:
                kill.set()
            outcomes.append(await one(client, started))

    async with httpx.AsyncClient(base_url=url, timeout=30) as client:
        await asyncio.gather(*(worker(client) for _ in range(WORKERS)))
    return outcomes


def test_killing_a_backend_mid_run_loses_no_request() -> None:
    """b0 is a `flatshare serve-sim` process (killed with SIGKILL by its pid); b1 runs in this process."""
    with (
        serve_sim_processes(1, "--kv-tokens", "8192", "--speed", "2") as sims,
        sim_backends(1, kv_tokens=8192, max_model_len=8000) as live,
    ):
        config = gateway_config([sims[0].url, live[0]], policy="round-robin")
        with running_gateway(config) as (_, url):
            kill = asyncio.Event()

            async def killer() -> float:
                await kill.wait()
                await asyncio.sleep(0.1)  # let the requests just sent start streaming
                os.kill(sims[0].pid, signal.SIGKILL)
                return time.monotonic()

            async def both() -> tuple[list[Outcome], float]:
                killed_at = asyncio.ensure_future(killer())
                outcomes = await run(url, kill)
                return outcomes, await killed_at

            outcomes, _ = asyncio.run(both())
            sims[0].process.wait(timeout=10)
            wait_for(lambda: not backend_rows(url)["b0"]["healthy"], 5.0, "b0 to be marked unhealthy")
            metrics = scrape(url)

    assert len(outcomes) == REQUESTS  # none lost
    for outcome in outcomes:
        complete = outcome.done and outcome.tokens == MAX_TOKENS and not outcome.error
        explicit_error = bool(outcome.error) and (outcome.status != 200 or outcome.done)
        assert complete or explicit_error, outcome
    by_result = Counter((o.backend, not o.error) for o in outcomes)
    assert by_result[("b0", True)] > 0 and by_result[("b1", True)] > 0  # both served before the kill
    failed = [o for o in outcomes if o.error]
    assert failed, "killing a backend mid-stream should cut some streams"
    assert all(o.backend == "b0" and "b0" in o.error for o in failed)
    last = sorted(outcomes, key=lambda o: o.sent_at)[-REQUESTS // 3 :]
    assert all(o.backend == "b1" and not o.error for o in last)  # routing moved to the live backend
    assert metrics["flatshare_gateway_backend_healthy{backend=b0}"] == 0
    assert metrics["flatshare_gateway_errors_total{kind=upstream_midstream}"] == len(failed)
