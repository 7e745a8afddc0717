"""The `httpx` upstream client (`flatshare.gateway.upstream` says when it is used and what every client
promises): pure Python over anyio, any URL."""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import AsyncIterator, Mapping

import httpx

from flatshare import httpclient
from flatshare.gateway.upstream import FirstByteTimeout, UpstreamError, UpstreamResponse, read_bounded


class _HttpxResponse:
    def __init__(self, response: httpx.Response) -> None:
        self._response = response
        self.status = response.status_code
        self.headers = list(response.headers.items())

    async def chunks(self) -> AsyncIterator[bytes]:
        try:
            async for chunk in self._response.aiter_raw():
                yield chunk
        except httpx.HTTPError as exc:
            raise UpstreamError(repr(exc)) from exc

    async def read(self) -> bytes:
        try:
            return await self._response.aread()
        except httpx.HTTPError as exc:
            raise UpstreamError(repr(exc)) from exc

    async def close(self) -> None:
        await self._response.aclose()


class HttpxUpstream:
    name = "httpx"

    def __init__(
        self,
        connect_timeout_s: float,
        read_timeout_s: float,
        max_connections: int,
        default_headers: Mapping[str, str] | None = None,
    ) -> None:
        limits = httpclient.limits(max_connections, max_keepalive_connections=256)
        timeout = httpx.Timeout(read_timeout_s, connect=connect_timeout_s)
        self._client = httpx.AsyncClient(limits=limits, timeout=timeout, headers=dict(default_headers or {}))

    async def start(self) -> None:
        return None

    async def post(
        self, url: str, body: bytes, headers: dict[str, str], head_timeout_s: float | None = None
    ) -> UpstreamResponse:
        request = self._client.build_request("POST", url, content=body, headers=headers)
        try:
            async with asyncio.timeout(head_timeout_s):
                return _HttpxResponse(await self._client.send(request, stream=True))
        except TimeoutError as exc:
            raise FirstByteTimeout(f"no response head from the backend within {head_timeout_s} s") from exc
        except httpx.HTTPError as exc:
            raise UpstreamError(repr(exc), refused=isinstance(exc, httpx.ConnectError)) from exc

    async def fetch(
        self, url: str, timeout_s: float, json_body: object = None, max_bytes: int | None = None
    ) -> tuple[int, bytes]:
        method, content = ("GET", None) if json_body is None else ("POST", json.dumps(json_body).encode())
        headers = {} if content is None else {"content-type": "application/json"}
        try:
            async with self._client.stream(
                method, url, content=content, headers=headers, timeout=timeout_s
            ) as r:
                limit = max_bytes if max_bytes is not None else math.inf
                body = await read_bounded(r.aiter_bytes(), r.headers.get("content-length"), limit, url)
                return r.status_code, body
        except httpx.HTTPError as exc:
            raise UpstreamError(repr(exc), refused=isinstance(exc, httpx.ConnectError)) from exc

    async def close(self) -> None:
        await self._client.aclose()
