"""A backend the proxy finds gone before the next poll does: the flip to unhealthy is logged and reported
like one a poll finds (found by the soak benchmark, benchmarks/gateway_soak.py: a killed backend came
back with "backend b0 is healthy" in the log but had never been logged unhealthy, and a discovered
backend's membership audit lines missed the `unhealthy` change)."""

from __future__ import annotations

import asyncio
import logging
import time

import httpx
import pytest
from gatewaykit import backend_rows, gateway_config, read_events, running_gateway

from flatshare.gateway.backends import BackendState
from flatshare.gateway.config import BackendConfig, PollConfig
from flatshare.gateway.poller import Poller
from flatshare.gateway.upstream_make import make_upstream
from kit.fake_vllm import FakeState, fake_backend_app
from kit.net import ThreadServer, free_port, wait_for

SLOW_POLL = PollConfig(interval_s=60.0, timeout_s=0.5, stale_after_s=120.0, unhealthy_after_failures=3)
BODY = {"model": "fake", "prompt": "hi", "max_tokens": 4, "stream": True}


def flips(caplog: pytest.LogCaptureFixture, name: str) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "flatshare.gateway.poller" and r.getMessage().startswith(f"backend {name} is")
    ]


def test_a_refused_proxied_request_logs_the_backend_unhealthy(caplog: pytest.LogCaptureFixture) -> None:
    """Polls every 60 s: only the first (at start-up) runs, so the proxy is the one to find b0 gone."""
    caplog.set_level(logging.INFO, logger="flatshare.gateway")
    gone = ThreadServer(fake_backend_app(FakeState()))
    with gone, ThreadServer(fake_backend_app(FakeState())) as live:
        config = gateway_config([gone.url, live.url], policy="round-robin", poll=SLOW_POLL)
        with running_gateway(config) as (_, url):
            assert backend_rows(url)["b0"]["healthy"]
            gone.stop()  # its port now refuses connections
            for _ in range(2):  # round-robin: one of the two goes to b0 first
                with httpx.stream("POST", f"{url}/v1/completions", json=BODY, timeout=10) as response:
                    assert response.status_code == 200
                    assert response.headers["x-flatshare-backend"] == "b1"
                    assert read_events(response)[-1] == "[DONE]"
            assert not backend_rows(url)["b0"]["healthy"]
    unhealthy = [m for m in flips(caplog, "b0") if " is unhealthy: " in m]
    assert len(unhealthy) == 1, flips(caplog, "b0")
    assert "proxy: " in unhealthy[0] and "refused" in unhealthy[0]


def test_the_health_hook_hears_flips_the_proxy_records() -> None:
    """Membership's hook (`Poller(on_health=...)`) hears a flip to unhealthy recorded outside the poller,
    as the proxy records a refused connection or a cut stream, and the recovery a poll finds."""
    heard: list[tuple[str, bool]] = []
    with ThreadServer(fake_backend_app(FakeState())) as server:

        async def go() -> None:
            upstream = make_upstream("auto", [server.url], 1.0, 5.0, 4)
            state = BackendState(BackendConfig(server.url, "b0"), SLOW_POLL)
            poller = Poller(state, upstream, on_health=lambda s, healthy: heard.append((s.name, healthy)))
            try:
                assert await poller.poll_once()
                state.record_failure("proxy: a stream was cut")  # 1 of 3: still healthy, no flip
                state.record_failure("proxy: cannot connect", refused=True)
                assert not state.healthy
                state.record_failure("proxy: cannot connect", refused=True)  # no flip: already down
                assert await poller.poll_once()
            finally:
                await upstream.close()

        asyncio.run(go())
    assert heard == [("b0", True), ("b0", False), ("b0", True)]


def test_a_backend_unreachable_from_the_start_is_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    """A backend that never answered was silent (issue 37: only /gateway/backends and 503s showed it):
    its first failed poll is a change from "not known yet" to unhealthy, logged once however many polls
    fail after it; its first good poll is then logged healthy."""
    caplog.set_level(logging.INFO, logger="flatshare.gateway")
    with ThreadServer(fake_backend_app(FakeState())) as live:
        dead = f"http://127.0.0.1:{free_port()}"
        with running_gateway(gateway_config([dead, live.url])) as (gateway, url):
            wait_for(lambda: gateway.pool.by_name["b0"].failures >= 1, 10.0, "b0's first failed poll")
            time.sleep(0.5)  # ten more polls at FAST_POLL's 0.05 s
            assert not backend_rows(url)["b0"]["healthy"]
    unhealthy = [m for m in flips(caplog, "b0") if " is unhealthy: " in m]
    assert len(unhealthy) == 1, flips(caplog, "b0")
    assert "cannot reach it" in unhealthy[0]
    assert [m for m in flips(caplog, "b1") if " is healthy" in m], flips(caplog, "b1")
