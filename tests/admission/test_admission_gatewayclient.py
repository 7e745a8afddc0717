"""The endpoint mode reads the gateway's `GET /gateway/backends` as the one load shape: what the gateway
knows of each backend comes back as the `BackendLoad` its own routing sees (the real app, in process)."""

from __future__ import annotations

import asyncio
import dataclasses
import math

import httpx

from flatshare.admission.gatewayclient import BackendPoller, backend_loads
from flatshare.gateway.app import build_gateway
from flatshare.gateway.config import BackendConfig, GatewayConfig
from flatshare.policy.load import BackendLoad
from flatshare.protocol.prometheus import parse_load
from kit.fake_vllm import metrics_page

NOW = 100.0


def gateway_answer() -> tuple[dict[str, object], list[BackendLoad]]:
    config = GatewayConfig(
        backends=(BackendConfig("http://127.0.0.1:1", "b0"), BackendConfig("http://127.0.0.1:2", "b1"))
    )
    gateway = build_gateway(config, clock=lambda: NOW)
    b0 = gateway.pool.by_name["b0"]
    b0.record_scrape(
        parse_load(metrics_page("m", 0.625, running=3, waiting=2, preemptions=7), "b0"), NOW - 0.05
    )
    expected = [state.snapshot(NOW) for state in gateway.pool.states]
    assert expected[0].kv_capacity_tokens is None  # the fake page has no cache_config_info, as the row

    async def get() -> dict[str, object]:
        transport = httpx.ASGITransport(app=gateway.app)
        async with httpx.AsyncClient(transport=transport, base_url="http://gw") as client:
            return dict((await client.get("/gateway/backends")).json())

    return asyncio.run(get()), expected


def test_backend_rows_come_back_as_the_loads_the_gateway_routes_on() -> None:
    answer, expected = gateway_answer()
    b0, b1 = backend_loads(answer)
    assert b0 == dataclasses.replace(expected[0], scrape_age_s=round(expected[0].scrape_age_s, 4))
    assert (b0.kv_usage, b0.running, b0.waiting, b0.preemptions, b0.stale) == (0.625, 3, 2, 7.0, False)
    assert b1 == expected[1] and b1.kv_usage is None and b1.scrape_age_s == math.inf and not b1.healthy


def test_the_poller_keeps_fresh_readings_only() -> None:
    answer, _ = gateway_answer()

    async def poll() -> BackendPoller:
        transport = httpx.MockTransport(lambda request: httpx.Response(200, json=answer))
        async with httpx.AsyncClient(transport=transport) as client:
            poller = BackendPoller(client, "http://gw", interval_s=0.01)
            task = asyncio.create_task(poller.run())
            await asyncio.sleep(0.05)
            task.cancel()
            return poller

    poller = asyncio.run(poll())
    assert poller.readings and {load.name for _, load in poller.readings} == {"b0"}
    assert poller.errors == 0
