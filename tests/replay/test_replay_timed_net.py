"""Timestamps at the socket: a raw HTTP server in the same process notes when it read each request and
wrote each chunk (the same clock), and the driver's records must agree with it."""

from __future__ import annotations

import asyncio
import json
import time

import httpx
import pytest

from flatshare.replay.clients import ClientPool
from flatshare.replay.endpoints import Endpoint
from flatshare.replay.ledger import Ledger
from flatshare.replay.timed_net import TimedStream
from flatshare.replay.wallclock import WallClockOptions, run_wallclock
from kit.replay import session, workload

GAP_S = 0.15


class RawServer:
    """Streams `max_tokens` chunks, the first right away and the rest `GAP_S` apart, keeping
    `perf_counter` times of each request's arrival and of every chunk written."""

    def __init__(self) -> None:
        self.arrived: list[float] = []
        self.written: list[list[float]] = []

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next(
                    int(h.split(b":")[1])
                    for h in head.split(b"\r\n")
                    if h.lower().startswith(b"content-length")
                )
                body = json.loads(await reader.readexactly(length))
                self.arrived.append(time.perf_counter())
                await self._respond(writer, body["max_tokens"])
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    async def _respond(self, writer: asyncio.StreamWriter, n: int) -> None:
        writer.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
        )
        times: list[float] = []
        for k in range(1, n + 1):
            choice = {"text": " w", "finish_reason": "length" if k == n else None}
            data = b"data: " + json.dumps({"choices": [choice], "usage": {"completion_tokens": k}}).encode()
            data += b"\n\n" + (b"data: [DONE]\n\n" if k == n else b"")
            times.append(time.perf_counter())
            writer.write(b"%x\r\n%s\r\n" % (len(data), data) + (b"0\r\n\r\n" if k == n else b""))
            await writer.drain()
            if k < n:
                await asyncio.sleep(GAP_S)
        self.written.append(times)


def test_send_and_token_times_are_taken_at_the_socket() -> None:
    server, ledger = RawServer(), Ledger()

    async def main() -> None:
        listener = await asyncio.start_server(server.handle, "127.0.0.1", 0)
        url = f"http://127.0.0.1:{listener.sockets[0].getsockname()[1]}"
        async with listener:
            options = WallClockOptions(sample_interval_s=60)
            await run_wallclock(
                workload(session("s", 2, max_tokens=3)), [Endpoint(url, "x")], ledger, options
            )

    asyncio.run(main())
    records = ledger.sorted_records()
    assert [r.status for r in records] == ["ok", "ok"]
    t0 = ledger.clock.t0
    for record, arrived, written in zip(records, server.arrived, server.written, strict=True):
        assert t0 + record.send_s <= arrived < t0 + record.send_s + 1.0  # sent, then read by the server
        assert len(record.token_times_s) == len(written) == 3
        for k, write_s in enumerate(written):  # each token stamped after its write, before the next's
            next_write_s = written[k + 1] if k + 1 < len(written) else write_s + GAP_S
            assert write_s <= t0 + record.token_times_s[k] < next_write_s
    first, second = records
    assert first.end_s is not None and second.send_s > first.end_s  # the kept-alive connection's own stamp


def test_the_pool_lends_timed_single_connection_clients() -> None:
    async def main() -> None:
        pool = ClientPool(httpx.Timeout(5.0))
        async with pool.lend("http://a") as one, pool.lend("http://a") as two:
            assert one is not two
        async with pool.lend("http://a") as again:
            assert again is one  # the most recently returned (`one` left the `with` last)
        assert pool.size == 2
        await pool.aclose()

    asyncio.run(main())


def test_a_refused_connection_is_a_connect_error() -> None:
    async def main() -> None:
        listener = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
        port = listener.sockets[0].getsockname()[1]
        listener.close()
        await listener.wait_closed()
        pool = ClientPool(httpx.Timeout(5.0))
        async with pool.lend("x") as client:
            with pytest.raises(httpx.ConnectError):
                await client.get(f"http://127.0.0.1:{port}/")
        await pool.aclose()

    asyncio.run(main())


def test_responses_carry_the_timed_stream() -> None:
    async def main() -> None:
        server = RawServer()
        listener = await asyncio.start_server(server.handle, "127.0.0.1", 0)
        url = f"http://127.0.0.1:{listener.sockets[0].getsockname()[1]}"
        pool = ClientPool(httpx.Timeout(5.0))
        async with listener, pool.lend(url) as client:
            body = {"max_tokens": 1}
            async with client.stream("POST", url, json=body) as response:
                stream = response.extensions["network_stream"]
                assert isinstance(stream, TimedStream) and stream.first_write_s is not None
                await response.aread()
                assert stream.received_s is not None and stream.received_s >= stream.first_write_s
        await pool.aclose()

    asyncio.run(main())
