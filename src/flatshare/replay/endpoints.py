"""The endpoints a wall-clock replay talks to: their URLs, what they serve, and which one a request goes to.

An endpoint is the base URL of an OpenAI-compatible server (`http://host:port`; a trailing `/` or `/v1`
is dropped). `discover` asks its `/v1/models` for the served model name and `max_model_len`; an endpoint
that does not answer is still replayed against (its requests are then recorded as failed), with
`model` unset and the reason in `error`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import httpx

from flatshare.errors import InputError
from flatshare.protocol.models import fetch_models, first_model


@dataclass(frozen=True)
class Endpoint:
    """One server: `url` (normalized base URL, also the records' `engine`), `model` to put in request
    bodies (None: omit the field), `max_model_len` as the server reports it."""

    url: str
    model: str | None = None
    max_model_len: int | None = None
    error: str | None = None

    @property
    def name(self) -> str:
        return self.url

    def to_json(self) -> dict[str, Any]:
        return {
            "url": self.url,
            "model": self.model,
            "max_model_len": self.max_model_len,
            "error": self.error,
        }


def normalize_url(url: str) -> str:
    """`http(s)://host[:port][/prefix]`, without a trailing `/` or `/v1`; InputError if not a URL."""
    text = url.strip().rstrip("/")
    text = text.removesuffix("/v1")
    parts = urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.netloc or parts.query or parts.fragment:
        raise InputError(f"endpoint {url!r}: expected a base URL like http://127.0.0.1:8000")
    return text


def sticky_index(session_id: str, n: int) -> int:
    """Which of `n` endpoints serves a session: the rule of `flatshare.replay.virtual.sticky_route`."""
    return sum(session_id.encode()) % n


async def discover(client: httpx.AsyncClient, url: str) -> Endpoint:
    """Ask `url`'s `/v1/models` what it serves (the first model listed)."""
    base = normalize_url(url)
    try:
        model, max_len = first_model(await fetch_models(client, base))
    except (httpx.HTTPError, ValueError, KeyError, IndexError, TypeError) as exc:
        return Endpoint(base, error=f"/v1/models: {type(exc).__name__}: {exc}")
    return Endpoint(base, model, max_len)
