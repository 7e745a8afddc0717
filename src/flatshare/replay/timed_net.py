"""An httpcore network backend that timestamps bytes where they enter and leave the process.

With hundreds of open streams, tokens of one server step reach the driver together, and each costs
~0.1 ms of Python (httpx, h11, JSON) before the next is looked at; timing a token when its chunk comes
out of httpx would then add ~0.1 ms for every token read before it. Here an `asyncio.Protocol` notes
`time.perf_counter()` in `data_received`, which the event loop calls for every ready socket before it
resumes any task, and `read` hands each received packet up with its time (`received_s`). `write` notes
when a request's first byte was handed to the kernel (`first_write_s`, reset by `mark_request_done`).
The stream of a response is `response.extensions["network_stream"]`.

It speaks httpcore's `AsyncNetworkBackend` interface (TCP, TLS via `start_tls`), raising httpcore's
exceptions as its own anyio backend does, so httpx maps them to `httpx.ConnectError`, `ReadTimeout`, ...
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
import time
from collections import deque
from collections.abc import Iterable
from typing import Any, cast

import httpcore
from httpcore._backends.base import SOCKET_OPTION

HIGH_WATER = 1 << 20  # buffered bytes at which the socket stops being read until the reader catches up


class _Protocol(asyncio.Protocol):
    def __init__(self) -> None:
        self.packets: deque[tuple[bytes, float]] = deque()
        self.buffered = 0
        self.closed = False
        self.error: BaseException | None = None
        self.transport: asyncio.Transport | None = None
        self._waiter: asyncio.Future[None] | None = None
        self.writable = asyncio.Event()
        self.writable.set()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is one, without the subclass

    def data_received(self, data: bytes) -> None:
        self.packets.append((data, time.perf_counter()))
        self.buffered += len(data)
        if self.buffered > HIGH_WATER and self.transport is not None:
            self.transport.pause_reading()
        self._wake()

    def eof_received(self) -> bool:
        self.closed = True
        self._wake()
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed, self.error = True, exc
        self.writable.set()
        self._wake()

    def pause_writing(self) -> None:
        self.writable.clear()

    def resume_writing(self) -> None:
        self.writable.set()

    async def wait_readable(self) -> None:
        self._waiter = asyncio.get_running_loop().create_future()
        try:
            await self._waiter
        finally:
            self._waiter = None

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)


class TimedStream(httpcore.AsyncNetworkStream):
    """One connection; `received_s` / `first_write_s` are `time.perf_counter()` values (or None)."""

    def __init__(self, transport: asyncio.Transport, protocol: _Protocol) -> None:
        self._transport = transport
        self._protocol = protocol
        self.received_s: float | None = None
        self.first_write_s: float | None = None

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        p = self._protocol
        while not p.packets:
            if p.closed:
                if p.error is not None:
                    raise httpcore.ReadError(str(p.error) or type(p.error).__name__)
                return b""
            try:
                async with asyncio.timeout(timeout):
                    await p.wait_readable()
            except TimeoutError:
                raise httpcore.ReadTimeout(f"no data for {timeout} s") from None
        data, self.received_s = p.packets.popleft()
        if len(data) > max_bytes:
            p.packets.appendleft((data[max_bytes:], self.received_s))
            data = data[:max_bytes]
        p.buffered -= len(data)
        if p.buffered <= HIGH_WATER // 4 and not self._transport.is_closing():
            self._transport.resume_reading()
        return data

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        if not buffer:
            return
        if self._protocol.closed or self._transport.is_closing():
            raise httpcore.WriteError("the connection is closed")
        if self.first_write_s is None:
            self.first_write_s = time.perf_counter()
        self._transport.write(buffer)
        try:
            async with asyncio.timeout(timeout):
                await self._protocol.writable.wait()
        except TimeoutError:
            raise httpcore.WriteTimeout(f"could not write for {timeout} s") from None

    def mark_request_done(self) -> None:
        """The next write starts a new request."""
        self.first_write_s = None

    async def aclose(self) -> None:
        self._transport.close()

    async def start_tls(
        self, ssl_context: ssl.SSLContext, server_hostname: str | None = None, timeout: float | None = None
    ) -> TimedStream:
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(timeout):
                transport = await loop.start_tls(
                    self._transport, self._protocol, ssl_context, server_hostname=server_hostname
                )
        except TimeoutError:
            self._transport.close()
            raise httpcore.ConnectTimeout("TLS handshake timed out") from None
        except (OSError, ssl.SSLError) as exc:
            self._transport.close()
            raise httpcore.ConnectError(str(exc)) from exc
        return TimedStream(cast(asyncio.Transport, transport), self._protocol)

    def get_extra_info(self, info: str) -> Any:
        if info == "is_readable":  # the pool's test of an idle connection: closed, or unexpected bytes
            return self._protocol.closed or bool(self._protocol.packets)
        key = {"client_addr": "sockname", "server_addr": "peername"}.get(info, info)
        return self._transport.get_extra_info(key)


class TimedBackend(httpcore.AsyncNetworkBackend):
    """Connects `TimedStream`s (TCP only; Unix sockets are not supported)."""

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[SOCKET_OPTION] | None = None,
    ) -> TimedStream:
        loop = asyncio.get_running_loop()
        local = (local_address, 0) if local_address else None
        try:
            async with asyncio.timeout(timeout):
                transport, protocol = await loop.create_connection(_Protocol, host, port, local_addr=local)
        except TimeoutError:
            raise httpcore.ConnectTimeout(f"connecting to {host}:{port} timed out") from None
        except OSError as exc:
            raise httpcore.ConnectError(str(exc)) from exc
        sock = transport.get_extra_info("socket")
        for option in socket_options or ():
            with contextlib.suppress(OSError):
                sock.setsockopt(*option)
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return TimedStream(transport, protocol)

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)
