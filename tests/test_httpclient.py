"""flatshare's httpx clients drop an idle connection before uvicorn (so vLLM) closes it."""

from __future__ import annotations

import asyncio
import time

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route
from tests.kit.net import ThreadServer

from flatshare import httpclient

UVICORN_KEEP_ALIVE_S = 5  # uvicorn's default, which vLLM's API server keeps
IDLE_S = 3.0  # past our expiry, inside the server's: httpx's default (5 s) would still reuse the connection


async def _port(request: Request) -> PlainTextResponse:
    """The client's port: a new one means a new connection."""
    assert request.client is not None
    return PlainTextResponse(str(request.client.port))


APP = Starlette(routes=[Route("/port", _port)])
TIMEOUT = httpx.Timeout(5.0)


def test_the_keep_alive_is_well_below_uvicorns() -> None:
    assert httpclient.KEEPALIVE_S <= UVICORN_KEEP_ALIVE_S / 2
    assert httpclient.KEEPALIVE_S < IDLE_S < UVICORN_KEEP_ALIVE_S


def test_an_async_client_reuses_a_fresh_connection_and_drops_one_idle_past_the_expiry() -> None:
    async def ports(url: str) -> list[str]:
        async with httpclient.async_client(TIMEOUT) as client:
            first = (await client.get(f"{url}/port")).text
            again = (await client.get(f"{url}/port")).text
            # Idle past our expiry, still inside the server's: a request now would race the server's close
            # if the client kept the connection until the server's 5 s.
            await asyncio.sleep(IDLE_S)
            later = (await client.get(f"{url}/port")).text
            return [first, again, later]

    with ThreadServer(APP, keep_alive_s=UVICORN_KEEP_ALIVE_S) as server:
        first, again, later = asyncio.run(ports(server.url))
    assert first == again, "a connection used just now is reused"
    assert later != again, "a connection idle past KEEPALIVE_S is not reused"


def test_a_sync_client_drops_an_idle_connection_too() -> None:
    with ThreadServer(APP, keep_alive_s=UVICORN_KEEP_ALIVE_S) as server, httpclient.client(TIMEOUT) as client:
        first = client.get(f"{server.url}/port").text
        time.sleep(IDLE_S)
        later = client.get(f"{server.url}/port").text
    assert later != first
