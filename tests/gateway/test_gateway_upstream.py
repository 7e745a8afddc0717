"""Both upstream clients (native and httpx) against a real HTTP server: streaming, keep-alive, failures."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator

import pytest

from flatshare.gateway.upstream import Upstream, UpstreamError, resolve_client
from flatshare.gateway.upstream_make import make_upstream
from kit.fake_vllm import FakeState, fake_backend_app
from kit.net import ThreadServer, free_port, wait_for

CLIENTS = ["native", "httpx"]
BODY = json.dumps({"prompt": "hi", "stream": True}).encode()
HEADERS = {"content-type": "application/json"}


@pytest.fixture
def backend() -> Iterator[tuple[FakeState, str]]:
    state = FakeState(tokens=5)
    with ThreadServer(fake_backend_app(state), keep_alive_s=1, log_level="critical") as server:
        yield state, server.url


def make(kind: str, read_timeout_s: float = 5.0) -> Upstream:
    return make_upstream(kind, [], 1.0, read_timeout_s, 16)


async def stream_once(upstream: Upstream, url: str) -> list[bytes]:
    response = await upstream.post(f"{url}/v1/completions", BODY, HEADERS)
    assert response.status == 200
    assert ("content-type", "text/event-stream; charset=utf-8") in [
        (k.lower(), v) for k, v in response.headers
    ]
    try:
        return [chunk async for chunk in response.chunks()]
    finally:
        await response.close()


@pytest.mark.parametrize("kind", CLIENTS)
def test_streams_whole_bodies_and_reuses_connections(kind: str, backend: tuple[FakeState, str]) -> None:
    state, url = backend

    async def go() -> list[bytes]:
        upstream = make(kind)
        await upstream.start()
        try:
            bodies = [b"".join(await stream_once(upstream, url)) for _ in range(3)]
            status, page = await upstream.fetch(f"{url}/metrics", 2.0)
            assert status == 200 and b"vllm:kv_cache_usage_perc" in page
            status, answer = await upstream.fetch(f"{url}/tokenize", 2.0, {"prompt": "a b c"})
            assert (status, json.loads(answer)["count"]) == (200, 3)
            return bodies
        finally:
            await upstream.close()

    bodies = asyncio.run(go())
    assert all(body.count(b"data: ") == 6 and body.endswith(b"data: [DONE]\n\n") for body in bodies)
    assert len(state.clients) == 1  # one kept-alive connection for the three requests


@pytest.mark.parametrize("kind", CLIENTS)
def test_a_connection_the_server_closed_while_idle_is_not_reused(
    kind: str, backend: tuple[FakeState, str]
) -> None:
    state, url = backend

    async def go() -> None:
        upstream = make(kind)
        try:
            await stream_once(upstream, url)
            await asyncio.sleep(1.5)  # the server's keep-alive timeout is 1 s
            await stream_once(upstream, url)
        finally:
            await upstream.close()

    asyncio.run(go())
    assert state.finished == 2 and len(state.clients) == 2


@pytest.mark.parametrize("kind", CLIENTS)
def test_refused_connection(kind: str) -> None:
    async def go() -> None:
        upstream = make(kind)
        try:
            await upstream.post(f"http://127.0.0.1:{free_port()}/v1/completions", BODY, HEADERS)
        finally:
            await upstream.close()

    with pytest.raises(UpstreamError) as caught:
        asyncio.run(go())
    assert caught.value.refused


@pytest.mark.parametrize("kind", CLIENTS)
def test_cut_mid_stream_raises_after_the_data_that_came(kind: str, backend: tuple[FakeState, str]) -> None:
    state, url = backend
    state.break_after = 2
    received: list[bytes] = []

    async def go() -> None:
        upstream = make(kind)
        try:
            response = await upstream.post(f"{url}/v1/completions", BODY, HEADERS)
            try:
                async for chunk in response.chunks():
                    received.append(chunk)
            finally:
                await response.close()
        finally:
            await upstream.close()

    with pytest.raises(UpstreamError):
        asyncio.run(go())
    assert b"".join(received).count(b'"text"') == 2


@pytest.mark.parametrize("kind", CLIENTS)
def test_silence_longer_than_the_read_timeout(kind: str, backend: tuple[FakeState, str]) -> None:
    state, url = backend
    state.token_delay_s = 1.0

    async def go() -> None:
        upstream = make(kind, read_timeout_s=0.3)
        try:
            await stream_once(upstream, url)
        finally:
            await upstream.close()

    started = time.monotonic()
    with pytest.raises(UpstreamError):
        asyncio.run(go())
    assert time.monotonic() - started < 1.5


@pytest.mark.parametrize("kind", CLIENTS)
def test_closing_early_makes_the_server_see_the_client_go(kind: str, backend: tuple[FakeState, str]) -> None:
    state, url = backend
    state.tokens, state.token_delay_s = 50, 0.02

    async def go() -> None:
        upstream = make(kind)
        try:
            response = await upstream.post(f"{url}/v1/completions", BODY, HEADERS)
            async for _ in response.chunks():
                break
            await response.close()
        finally:
            await upstream.close()

    asyncio.run(go())
    wait_for(lambda: state.aborted == 1, 5.0, "the backend to see the disconnect")
    assert state.finished == 0


def test_auto_prefers_native_for_plain_http_only() -> None:
    assert resolve_client("auto", ["http://a:1", "http://b:2"]) == "native"
    assert resolve_client("auto", ["http://a:1", "https://b:2"]) == "httpx"
    assert resolve_client("httpx", ["http://a:1"]) == "httpx"
