"""The httpx clients flatshare points at HTTP servers (vLLM, `serve-sim`, the gateway).

One setting matters here: how long an idle pooled connection is kept. uvicorn, and so vLLM's API
server, closes a connection idle for 5 s (`--timeout-keep-alive`, vLLM's `VLLM_HTTP_TIMEOUT_KEEP_ALIVE`),
and httpx's default `keepalive_expiry` is also 5 s. A request that picks up a connection at about that
age can be written just as the server closes it: the server never reads it, and httpx raises
`ReadError` / `RemoteProtocolError` ("Server disconnected") with nothing to say why. On two busy cores
the client's event loop falls behind by tens to hundreds of milliseconds, which widens the window; a
calibration against vLLM failed this way in CI. Dropping idle connections well before the server does
(`KEEPALIVE_S`) closes the window for any server whose keep-alive is at least that long.
"""

from __future__ import annotations

from typing import Any

import httpx

# Below uvicorn's 5 s default by more than the client's worst loop delay seen here.
KEEPALIVE_S = 2.0


def limits(max_connections: int | None = 100, max_keepalive_connections: int | None = 20) -> httpx.Limits:
    """httpx's `Limits` (its defaults for the counts) with idle connections dropped after `KEEPALIVE_S`."""
    return httpx.Limits(
        max_connections=max_connections,
        max_keepalive_connections=max_keepalive_connections,
        keepalive_expiry=KEEPALIVE_S,
    )


def async_client(
    timeout: httpx.Timeout, max_connections: int | None = 100, **kwargs: Any
) -> httpx.AsyncClient:
    """An `httpx.AsyncClient` with `limits(max_connections)`; `kwargs` go to httpx."""
    return httpx.AsyncClient(timeout=timeout, limits=limits(max_connections), **kwargs)


def client(timeout: httpx.Timeout, **kwargs: Any) -> httpx.Client:
    """A synchronous `httpx.Client` with `limits()`; `kwargs` go to httpx."""
    return httpx.Client(timeout=timeout, limits=limits(), **kwargs)
