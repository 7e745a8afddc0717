"""What one client connection may cost the gateway: limits on the server side of every connection.

`ClientLimits` is the `[clients]` table of the settings (docs/gateway.md, "Security model"). uvicorn's own
settings carry what uvicorn can enforce (`server_options`): the keep-alive idle timeout, a total
connection limit (`limit_concurrency`, answered 503), h11's incomplete-event size. The rest is enforced by
`guarded_protocol`, a subclass of the HTTP protocol uvicorn would pick (httptools when installed, else
h11), so the limits hold whichever parser runs:

- a request head (request line and headers) must arrive whole within `header_timeout_s` of the connection
  opening or of the previous response's end: a silent connection is closed, one that sent part of a head
  gets 408 and is closed (a header drip cannot hold a connection);
- a request head of more than `max_header_bytes` gets 431 and the connection is closed, checked on the
  bytes as they arrive, before the parser sees them (the head ends at the first blank line);
- at most `max_connections_per_address` connections from one client address at once; one more is
  answered 503 and closed.

The body is the app's to bound (`inbound.read_body`: `max_body_bytes`, and `body_timeout_s` for the whole
body, so a body sent a byte at a time ends in 408). The proxy's session map is bounded by `max_sessions`
and `session_ttl_s` (`baselines/sessions.py`).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections import Counter
from dataclasses import dataclass
from typing import Any

from uvicorn.protocols.http.auto import AutoHTTPProtocol

log = logging.getLogger("flatshare.gateway")
LINGER_S = 1.0
"""How long a refused connection is read (and dropped) after its answer, before it is closed."""


@dataclass(frozen=True)
class ClientLimits:
    """Limits on what clients may hold or send (module docstring); 0 turns a count limit off."""

    max_header_bytes: int = 64 * 1024
    header_timeout_s: float = 10.0
    body_timeout_s: float = 60.0
    keep_alive_timeout_s: float = 5.0
    max_connections_per_address: int = 1024
    max_connections: int = 0
    max_sessions: int = 50_000
    session_ttl_s: float = 600.0
    max_response_bytes: int = 64 * 1024 * 1024

    def __post_init__(self) -> None:
        for name in ("header_timeout_s", "body_timeout_s", "keep_alive_timeout_s", "session_ttl_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"clients.{name} must be > 0, got {getattr(self, name)}")
        if self.max_header_bytes < 1024:
            raise ValueError(f"clients.max_header_bytes must be >= 1024, got {self.max_header_bytes}")
        for name in ("max_sessions", "max_response_bytes"):
            if getattr(self, name) < 1:
                raise ValueError(f"clients.{name} must be >= 1, got {getattr(self, name)}")
        for name in ("max_connections_per_address", "max_connections"):
            if getattr(self, name) < 0:
                raise ValueError(f"clients.{name} must be >= 0 (0: no limit), got {getattr(self, name)}")


def server_options(limits: ClientLimits) -> dict[str, Any]:
    """Keyword arguments for `uvicorn.Config` that enforce `limits` (module docstring)."""
    return {
        "http": guarded_protocol(limits),
        "ws": "none",
        "timeout_keep_alive": limits.keep_alive_timeout_s,
        "limit_concurrency": limits.max_connections or None,
        "h11_max_incomplete_event_size": limits.max_header_bytes,
    }


def _answer(status: int, reason: str, message: str) -> bytes:
    """A whole HTTP/1.1 response that closes the connection, its body an OpenAI-style error."""
    body = json.dumps({"error": {"message": message, "type": reason.replace(" ", ""), "code": status}})
    head = (
        f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
    )
    return (head + body).encode()


def _head_part(tail: bytes, data: bytes) -> int:
    """How many bytes of `data` belong to a request head whose bytes so far end with `tail`: up to and
    including the blank line that ends it, or all of `data` when it does not end there."""
    end = (tail + data).find(b"\r\n\r\n")
    return len(data) if end < 0 else end + 4 - len(tail)


def guarded_protocol(limits: ClientLimits) -> type[asyncio.Protocol]:
    """uvicorn's HTTP protocol class with `limits` enforced (module docstring); one per server, as the
    per-address counts are the server's."""
    base: Any = AutoHTTPProtocol
    open_from: Counter[str] = Counter()

    class GuardedProtocol(base):
        _address: str | None = None
        _head_timer: asyncio.TimerHandle | None = None
        _head_bytes = 0
        _discarding = False
        _draining = False  # the rest of an answered request's body comes first (the header timeout runs)
        _tail = b""  # the last bytes of the head so far (its end may straddle two reads)
        _waiting_after: object = None  # the cycle that was current when the wait for a head began

        def connection_made(self, transport: asyncio.Transport) -> None:
            super().connection_made(transport)
            address = self.client[0] if self.client else None
            most = limits.max_connections_per_address
            if address is not None and most and open_from[address] >= most:
                log.warning("refused a connection from %s: it has %d open (the limit)", address, most)
                self._refuse(503, "Service Unavailable", f"more than {most} connections from one address")
                return
            if address is not None:
                self._address = address
                open_from[address] += 1
            self._await_head()

        def connection_lost(self, exc: Exception | None) -> None:
            self._stop_head_timer()
            if self._address is not None:
                open_from[self._address] -= 1
                if not open_from[self._address]:
                    del open_from[self._address]
                self._address = None
            super().connection_lost(exc)

        def data_received(self, data: bytes) -> None:
            if self._discarding:  # refused: what still comes is dropped until the close
                return
            if self._head_timer is None:  # a request under way: its body, not a head
                super().data_received(data)
                return
            if self._draining:  # the rest of an answered request's body, before the next head
                super().data_received(data)
                if self.cycle is not self._waiting_after:
                    self._stop_head_timer()  # the next request's head came with the body's end
                self._draining = self.cycle.more_body
                return
            if self._head_bytes + _head_part(self._tail, data) > limits.max_header_bytes:
                self._refuse(
                    431,
                    "Request Header Fields Too Large",
                    f"the request head is larger than the gateway's limit of {limits.max_header_bytes} bytes",
                )
                return
            super().data_received(data)
            if self.cycle is not self._waiting_after:  # a request head arrived whole
                self._stop_head_timer()
                return
            self._head_bytes += len(data)
            self._tail = (self._tail + data)[-3:]

        def on_response_complete(self) -> None:
            super().on_response_complete()
            cycle = self.cycle
            if self.transport.is_closing() or cycle is None or not cycle.response_complete:
                return  # closed, or a pipelined request's head is already here
            self._await_head()
            self._draining = bool(cycle.more_body)  # answered before its body came whole: it is dropped

        def _await_head(self) -> None:
            self._stop_head_timer()
            self._head_bytes, self._tail, self._draining = 0, b"", False
            self._waiting_after = self.cycle
            self._head_timer = self.loop.call_later(limits.header_timeout_s, self._head_timed_out)

        def _stop_head_timer(self) -> None:
            if self._head_timer is not None:
                self._head_timer.cancel()
                self._head_timer = None

        def _head_timed_out(self) -> None:
            self._head_timer = None
            if self.transport.is_closing() or self.cycle is not self._waiting_after:
                return
            if self._head_bytes:
                message = f"the request head did not arrive within {limits.header_timeout_s:g} s"
                self._refuse(408, "Request Timeout", message)
            else:
                self.transport.close()

        def _refuse(self, status: int, reason: str, message: str) -> None:
            """Answer and close, lingering a moment (reading and dropping what still comes) so that the
            client reads the answer before the close resets the connection."""
            self._stop_head_timer()
            if self.transport.is_closing() or self._discarding:
                return
            self._discarding = True
            self.transport.write(_answer(status, reason, message))
            if self.transport.can_write_eof():
                self.transport.write_eof()
            self.loop.call_later(LINGER_S, self.transport.close)

    return GuardedProtocol
