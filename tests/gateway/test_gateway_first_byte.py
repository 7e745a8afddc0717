"""A backend that answers its polls but hangs on completions (issue 32, item 7): a streaming request that
gets no response head within `first_byte_timeout_s` goes to another backend, and the hung one is degraded
(routing avoids it while another can serve) until it answers in time again. Fake backends over HTTP."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import ExitStack

import httpx
import pytest
from gatewaykit import backend_rows, gateway_config, read_events, running_gateway, scrape

from flatshare.gateway.backendlimits import BackendLimits
from kit.fake_vllm import FakeState, fake_backend_app
from kit.net import ThreadServer, wait_for

BODY = {"model": "fake", "prompt": "hi", "max_tokens": 4, "stream": True}
LIMITS = BackendLimits(first_byte_timeout_s=0.5, degraded_retry_s=1.5)


@pytest.fixture(params=["native", "httpx"])
def two_backends(request: pytest.FixtureRequest) -> Iterator[tuple[list[FakeState], str]]:
    states = [FakeState(hang_s=20.0), FakeState()]
    with ExitStack() as stack:
        urls = [stack.enter_context(ThreadServer(fake_backend_app(s))).url for s in states]
        config = gateway_config(
            urls,
            policy="round-robin",
            backend_limits=LIMITS,
            upstream_client=request.param,
            upstream_timeout_s=30,
        )
        _, gw = stack.enter_context(running_gateway(config))
        yield states, gw


def stream(gw: str) -> tuple[str, list[str]]:
    with httpx.stream("POST", f"{gw}/v1/completions", json=BODY, timeout=30) as response:
        assert response.status_code == 200
        return response.headers["x-flatshare-backend"], read_events(response)


def test_a_hung_backend_is_degraded_loses_traffic_and_recovers(
    two_backends: tuple[list[FakeState], str],
) -> None:
    """Before: each request sent to the hung backend waited `upstream_timeout_s` (here 30 s, by default
    600 s) before its retry, and the backend kept its share of traffic."""
    states, gw = two_backends
    started = time.monotonic()
    first = [stream(gw) for _ in range(2)]  # round-robin: one of them goes to b0 first
    waited = time.monotonic() - started
    assert [backend for backend, _ in first] == ["b1", "b1"]
    assert all(events[-1] == "[DONE]" for _, events in first)
    assert waited < 10, waited  # not the 30 s upstream timeout
    row = backend_rows(gw)["b0"]
    assert row["degraded"] and row["healthy"] and "no response head" in row["error"]
    metrics = scrape(gw)
    assert metrics["flatshare_gateway_backend_degraded{backend=b0}"] == 1
    assert metrics["flatshare_gateway_errors_total{kind=upstream_timeout}"] == 1
    assert [stream(gw)[0] for _ in range(4)] == ["b1"] * 4  # avoided while b1 can serve

    states[0].hang_s = 0.0  # b0 answers again: after degraded_retry_s one request tries it
    wait_for(lambda: not backend_rows(gw)["b0"]["degraded"], 5, "the retry period to pass")
    assert "b0" in {stream(gw)[0] for _ in range(2)}
    assert scrape(gw)["flatshare_gateway_backend_degraded{backend=b0}"] == 0


def test_with_every_backend_degraded_the_request_fails_cleanly(
    two_backends: tuple[list[FakeState], str],
) -> None:
    states, gw = two_backends
    states[1].hang_s = 20.0
    answer = httpx.post(f"{gw}/v1/completions", json=BODY, timeout=30)
    assert answer.status_code == 503 and "b0" in answer.text and "b1" in answer.text
    assert answer.headers["retry-after"] == "1"
