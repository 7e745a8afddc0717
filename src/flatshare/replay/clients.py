"""HTTP clients for many concurrent streams: one single-connection `httpx.AsyncClient` per request in
flight, lent from a per-endpoint pool.

Why not one client with a large connection pool: httpcore re-examines every pooled connection (an
`is_idle` check, and a socket poll for each idle one) whenever a request starts or a response closes, so
with N open streams each start costs O(N); at 100-240 streams that took 0.5-0.7 ms of CPU per streamed
token here and delayed first tokens by seconds. With one connection per client the bookkeeping is
O(1); a returned client keeps its connection alive for the next request to the same endpoint (the pool
lends the most recently returned client first). Connections use `flatshare.replay.timed_net`, which
timestamps bytes as they enter and leave the process.
"""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpcore
import httpx

from flatshare import httpclient
from flatshare.replay.timed_net import TimedBackend


class ClientPool:
    """Lends `httpx.AsyncClient`s of one connection each; makes a new one when none is idle."""

    def __init__(self, timeout: httpx.Timeout, transport: httpx.AsyncBaseTransport | None = None) -> None:
        self.timeout = timeout
        self.transport = transport
        self.ssl = ssl.create_default_context()  # ~30 ms: once, before the run, not per client
        self._idle: dict[str, list[httpx.AsyncClient]] = {}
        self._all: list[httpx.AsyncClient] = []

    @asynccontextmanager
    async def lend(self, endpoint: str) -> AsyncIterator[httpx.AsyncClient]:
        """A client for one request to `endpoint` (a base URL), back in the pool afterwards."""
        idle = self._idle.setdefault(endpoint, [])
        client = idle.pop() if idle else self._new()
        try:
            yield client
        finally:
            idle.append(client)

    @property
    def size(self) -> int:
        return len(self._all)

    async def aclose(self) -> None:
        for client in self._all:
            await client.aclose()
        self._all.clear()
        self._idle.clear()

    def _new(self) -> httpx.AsyncClient:
        client = httpx.AsyncClient(timeout=self.timeout, transport=self.transport or self._timed_transport())
        self._all.append(client)
        return client

    def _timed_transport(self) -> httpx.AsyncHTTPTransport:
        """httpx's transport over one connection of the timestamping backend (`timed_net`). httpx has no
        parameter for httpcore's `network_backend`, so its pool is replaced by an equal one that has it."""
        limits = httpclient.limits(max_connections=1, max_keepalive_connections=1)
        transport = httpx.AsyncHTTPTransport(verify=self.ssl, limits=limits)
        transport._pool = httpcore.AsyncConnectionPool(
            ssl_context=self.ssl,
            max_connections=1,
            max_keepalive_connections=1,
            keepalive_expiry=httpclient.KEEPALIVE_S,  # idle ones dropped before the server drops them
            network_backend=TimedBackend(),
        )
        return transport
