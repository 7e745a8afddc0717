"""A small HTTP/1.1 client for plain-HTTP backends: asyncio protocols and the `httptools` C parser.

Why: measured here, `httpx` costs 1-2 ms of CPU per request and `aiohttp` about 0.35 ms of first-token
latency; this client writes each request in one write and parses with the parser uvicorn uses, which
keeps the gateway near its latency target (benchmarks/gateway_overhead.py). `httptools` comes with
`uvicorn[standard]` (and vLLM). Scope, by design: `http://` only, requests with a body length known up
front, responses with `Content-Length` or chunked bodies (what uvicorn, and so vLLM, sends).

Connections are kept alive per (host, port), at most `max_connections` requests in flight. A pooled
connection the server closed while idle (uvicorn closes idle ones after 5 s) is noticed before reuse;
if one is found dead only after the request was written but before any byte came back, the request is
sent once more on a fresh connection (the server cannot have started it). Bodies are read on demand:
more than `HIGH_WATER` bytes waiting pauses reading from the backend (backpressure). Closing a response
before its end closes the connection, which makes vLLM abort the request.
"""

from __future__ import annotations

import asyncio
import json
import typing
from collections import deque
from collections.abc import AsyncIterator, Mapping
from functools import lru_cache
from urllib.parse import urlsplit

import httptools

from flatshare.gateway.upstream import (
    FirstByteTimeout,
    UpstreamError,
    UpstreamResponse,
    read_bounded,
)

HIGH_WATER = 1 << 20
MAX_IDLE_PER_BACKEND = 256


class ResponseHeadTimeout(UpstreamError):
    """No response head within the wait `_exchange` was given."""


@lru_cache(maxsize=1024)
def _split(url: str) -> tuple[str, int, str]:
    parts = urlsplit(url)
    if parts.scheme != "http" or not parts.hostname:
        raise UpstreamError(f"the native client speaks plain http only, not {url!r}")
    path = parts.path or "/"
    return parts.hostname, parts.port or 80, path + (f"?{parts.query}" if parts.query else "")


class _Connection(asyncio.Protocol):
    """One keep-alive connection; carries one request at a time."""

    def __init__(self) -> None:
        self.loop = asyncio.get_running_loop()
        self.transport: asyncio.Transport | None = None
        self.lost = False
        self.paused = False
        self._begin()

    def _begin(self) -> None:
        self.parser = httptools.HttpResponseParser(self)
        self.status = 0
        self.headers: list[tuple[str, str]] = []
        self.head: asyncio.Future[None] = self.loop.create_future()
        self.chunks: deque[bytes] = deque()
        self.buffered = 0
        self.complete = False
        self.keep_alive = False
        self.error: UpstreamError | None = None
        self.got_bytes = False
        self.waiter: asyncio.Future[None] | None = None

    def request(self, data: bytes) -> None:
        assert self.transport is not None
        self._begin()
        self.transport.write(data)

    # -- asyncio.Protocol ---------------------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = typing.cast(asyncio.Transport, transport)  # uvloop's is not an asyncio.Transport

    def data_received(self, data: bytes) -> None:
        self.got_bytes = True
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._fail(UpstreamError(f"malformed HTTP from the backend: {exc}"))
            self.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        if not self.complete:
            why = f" ({exc!r})" if exc is not None else ""  # None: a clean close (EOF), nothing to add
            self._fail(UpstreamError(f"the backend closed the connection before the response ended{why}"))

    # -- httptools callbacks ------------------------------------------------------------------------------
    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers.append((name.decode("latin-1"), value.decode("latin-1")))

    def on_headers_complete(self) -> None:
        self.status = self.parser.get_status_code()
        if not self.head.done():
            self.head.set_result(None)

    def on_body(self, body: bytes) -> None:
        self.chunks.append(body)
        self.buffered += len(body)
        if self.buffered > HIGH_WATER and self.transport is not None and not self.paused:
            self.paused = True
            self.transport.pause_reading()
        self._wake()

    def on_message_complete(self) -> None:
        self.complete = True
        self.keep_alive = self.parser.should_keep_alive()
        self._wake()

    # -- helpers ------------------------------------------------------------------------------------------
    def _fail(self, error: UpstreamError) -> None:
        self.error = self.error or error
        if not self.head.done():
            self.head.set_exception(error)
            self.head.exception()  # retrieved: the waiter may already be gone
        self._wake()

    def _wake(self) -> None:
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_result(None)

    def take(self) -> bytes:
        data = b"".join(self.chunks)
        self.chunks.clear()
        self.buffered = 0
        if self.paused and self.transport is not None:
            self.paused = False
            self.transport.resume_reading()
        return data

    def usable(self) -> bool:
        return not self.lost and self.transport is not None and not self.transport.is_closing()

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()


class _NativeResponse:
    """The response on one connection; gives the connection back to the pool when read to its end."""

    def __init__(self, conn: _Connection, owner: NativeUpstream, key: tuple[str, int]) -> None:
        self._conn = conn
        self._owner = owner
        self._key = key
        self._released = False
        self.status = conn.status
        self.headers = conn.headers

    async def chunks(self) -> AsyncIterator[bytes]:
        conn = self._conn
        while True:
            if conn.chunks:
                yield conn.take()
                continue
            if conn.complete:
                break
            if conn.error is not None:
                raise conn.error
            conn.waiter = conn.loop.create_future()
            try:
                async with asyncio.timeout(self._owner.read_timeout_s):
                    await conn.waiter
            except TimeoutError as exc:
                raise UpstreamError(f"no data from the backend for {self._owner.read_timeout_s} s") from exc
        await self.close()

    async def read(self) -> bytes:
        return b"".join([chunk async for chunk in self.chunks()])

    async def read_at_most(self, max_bytes: int | None, url: str) -> bytes:
        """The whole body; `AnswerTooLarge` once it passes `max_bytes` (None: no bound)."""
        if max_bytes is None:
            return await self.read()
        declared = dict((k.lower(), v) for k, v in self.headers).get("content-length")
        return await read_bounded(self.chunks(), declared, max_bytes, url)

    async def close(self) -> None:
        if self._released:
            return
        self._released = True
        conn = self._conn
        if conn.complete and conn.keep_alive and conn.usable() and not conn.chunks:
            self._owner.give_back(self._key, conn)
        else:
            conn.close()
        self._owner.slots.release()


class NativeUpstream:
    """See the module docstring; the same interface as `upstream_httpx.HttpxUpstream`."""

    name = "native"

    def __init__(
        self,
        connect_timeout_s: float,
        read_timeout_s: float,
        max_connections: int,
        default_headers: Mapping[str, str] | None = None,
    ) -> None:
        self._default_lines = [f"{k}: {v}" for k, v in (default_headers or {}).items()]
        self.connect_timeout_s = connect_timeout_s
        self.read_timeout_s = read_timeout_s
        self.max_connections = max_connections
        self._idle: dict[tuple[str, int], list[_Connection]] = {}
        self._slots: asyncio.Semaphore | None = None

    @property
    def slots(self) -> asyncio.Semaphore:
        if self._slots is None:
            self._slots = asyncio.Semaphore(self.max_connections)
        return self._slots

    async def start(self) -> None:
        return None

    async def post(
        self, url: str, body: bytes, headers: dict[str, str], head_timeout_s: float | None = None
    ) -> UpstreamResponse:
        if head_timeout_s is None or head_timeout_s >= self.read_timeout_s:
            return await self._send("POST", url, body, headers, self.read_timeout_s)
        try:
            return await self._send("POST", url, body, headers, head_timeout_s)
        except ResponseHeadTimeout as exc:
            raise FirstByteTimeout(str(exc)) from exc

    async def fetch(
        self, url: str, timeout_s: float, json_body: object = None, max_bytes: int | None = None
    ) -> tuple[int, bytes]:
        if json_body is None:
            response = await self._send("GET", url, None, {}, timeout_s)
        else:
            body = json.dumps(json_body).encode()
            response = await self._send("POST", url, body, {"content-type": "application/json"}, timeout_s)
        try:
            async with asyncio.timeout(timeout_s):
                return response.status, await response.read_at_most(max_bytes, url)
        except TimeoutError as exc:
            raise UpstreamError(f"{url}: no full answer within {timeout_s} s") from exc
        finally:
            await response.close()

    async def _send(
        self, method: str, url: str, body: bytes | None, headers: dict[str, str], timeout_s: float
    ) -> _NativeResponse:
        host, port, path = _split(url)
        lines = [f"{method} {path} HTTP/1.1", f"host: {host}:{port}", "user-agent: flatshare-gateway"]
        lines += self._default_lines
        lines += [f"{k}: {v}" for k, v in headers.items()]
        if body is not None:
            lines.append(f"content-length: {len(body)}")
        data = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + (body or b"")
        await self.slots.acquire()
        try:
            return await self._exchange((host, port), data, timeout_s)
        except BaseException:
            self.slots.release()
            raise

    async def _exchange(self, key: tuple[str, int], data: bytes, timeout_s: float) -> _NativeResponse:
        for attempt in range(2):
            conn, reused = self._pooled(key) if attempt == 0 else (None, False)
            if conn is None:
                conn = await self._connect(key)
            conn.request(data)
            try:
                async with asyncio.timeout(timeout_s):
                    await conn.head
            except TimeoutError as exc:
                conn.close()
                raise ResponseHeadTimeout(f"no response head from the backend within {timeout_s} s") from exc
            except UpstreamError:
                conn.close()
                if reused and not conn.got_bytes:
                    continue  # a keep-alive connection the server had closed: once more on a fresh one
                raise
            except BaseException:  # cancelled: the request is half done on this connection
                conn.close()
                raise
            return _NativeResponse(conn, self, key)
        raise AssertionError("unreachable")  # pragma: no cover - the fresh connection's failure is raised

    def _pooled(self, key: tuple[str, int]) -> tuple[_Connection | None, bool]:
        idle = self._idle.get(key)
        while idle:
            conn = idle.pop()
            if conn.usable():
                return conn, True
        return None, False

    async def _connect(self, key: tuple[str, int]) -> _Connection:
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(self.connect_timeout_s):
                _, conn = await loop.create_connection(_Connection, *key)
        except TimeoutError as exc:
            raise UpstreamError(f"connecting to {key[0]}:{key[1]} timed out") from exc
        except OSError as exc:
            raise UpstreamError(f"cannot connect to {key[0]}:{key[1]}: {exc}", refused=True) from exc
        return conn

    def give_back(self, key: tuple[str, int], conn: _Connection) -> None:
        idle = self._idle.setdefault(key, [])
        if len(idle) < MAX_IDLE_PER_BACKEND:
            idle.append(conn)
        else:
            conn.close()

    async def close(self) -> None:
        for idle in self._idle.values():
            for conn in idle:
                conn.close()
        self._idle.clear()
