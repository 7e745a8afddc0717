"""The HTTP client the gateway talks to backends with (proxied requests, polls, /tokenize), behind one
small interface.

This module is the interface (`Upstream`, `UpstreamResponse`, the errors) and the choice
(`resolve_client`); `upstream_make.make_upstream` builds the client. Two implementations, chosen by the
config key `upstream_client`:
- `native` (`upstream_native.py`): a small HTTP/1.1 client on asyncio and the `httptools` parser, for
  `http://` backends. The fast path: it keeps the gateway near its latency and rate targets.
- `httpx` (`upstream_httpx.py`, on `httpx.AsyncClient`): pure Python over anyio; any URL, but measured here
  (benchmarks/gateway_overhead.py) it costs 1-2 ms of CPU per request and sustains a few hundred
  streams per second at most.
- `auto` (default): `native` when `httptools` can be imported (it comes with `uvicorn[standard]` and
  vLLM) and every backend is `http://`, else `httpx`.
Both send `default_headers` with every request (`Authorization: Bearer <backend_api_key>`, `auth_headers`:
polls, model discovery, /tokenize and proxied requests alike), keep connections alive, pass bytes through
undecoded, bound connecting by `connect_timeout_s` and
each wait for data by `upstream_timeout_s`, and raise `UpstreamError` (with `refused` for a connection
that could not be opened) for every transport failure, before or during the response.
"""

from __future__ import annotations

import importlib.util
from collections.abc import AsyncIterator, Iterable
from typing import Protocol

UPSTREAM_CLIENTS = ("auto", "native", "httpx")


class UpstreamError(Exception):
    """A transport failure talking to a backend; `refused` when no connection could be opened."""

    def __init__(self, message: str, refused: bool = False) -> None:
        super().__init__(message)
        self.refused = refused


class AnswerTooLarge(ValueError):
    """A `fetch` answer longer than its `max_bytes` (a misbehaving backend; the read stopped there)."""


def declares_more(content_length: str | None, max_bytes: float) -> bool:
    """Whether a `Content-Length` header (ASCII digits, else ignored) declares more than `max_bytes`."""
    text = content_length or ""
    if not (text.isascii() and text.isdigit()):
        return False
    return len(text) > 18 or int(text) > max_bytes


async def read_bounded(
    chunks: AsyncIterator[bytes], content_length: str | None, max_bytes: float, url: str
) -> bytes:
    """A body read from `chunks`; `AnswerTooLarge` as soon as it declares or passes `max_bytes`."""
    if declares_more(content_length, max_bytes):
        raise AnswerTooLarge(f"{url}: the answer declares more than {max_bytes} bytes")
    body = bytearray()
    async for chunk in chunks:
        body += chunk
        if len(body) > max_bytes:
            raise AnswerTooLarge(f"{url}: the answer is longer than {max_bytes} bytes")
    return bytes(body)


class FirstByteTimeout(UpstreamError):
    """No response head within the `head_timeout_s` a `post` was given (the backend took the request and
    hangs on it); the connection is closed, so the backend may abort the request."""


class UpstreamResponse(Protocol):
    status: int
    headers: list[tuple[str, str]]

    def chunks(self) -> AsyncIterator[bytes]: ...

    async def read(self) -> bytes: ...

    async def close(self) -> None: ...


class Upstream(Protocol):
    """`post` streams a proxied request's answer (`FirstByteTimeout` when its head takes longer than
    `head_timeout_s`, if given); `fetch` reads a small one whole (polls, /tokenize), `AnswerTooLarge`
    past `max_bytes` (if given; the rest is not read)."""

    name: str

    async def start(self) -> None: ...

    async def post(
        self, url: str, body: bytes, headers: dict[str, str], head_timeout_s: float | None = None
    ) -> UpstreamResponse: ...

    async def fetch(
        self, url: str, timeout_s: float, json_body: object = None, max_bytes: int | None = None
    ) -> tuple[int, bytes]: ...

    async def close(self) -> None: ...


def resolve_client(kind: str, urls: Iterable[str] = ()) -> str:
    """`auto` -> `native` when `httptools` imports and every URL is plain http, else `httpx`."""
    if kind != "auto":
        return kind
    plain = all(url.startswith("http://") for url in urls)
    return "native" if plain and importlib.util.find_spec("httptools") is not None else "httpx"


def auth_headers(backend_api_key: str) -> dict[str, str]:
    """The headers every request to a backend carries: its API key as a bearer token, when set."""
    return {"authorization": f"Bearer {backend_api_key}"} if backend_api_key else {}
