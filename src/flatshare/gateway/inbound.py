"""Reading and checking a client's request before anything is sent upstream.

Refused here, each with a 4xx OpenAI-style error naming the problem: a body over `max_body_bytes` (413,
checked against Content-Length first, then while reading); a body not whole within
`clients.body_timeout_s` (408); a body that is not UTF-8 JSON, not a JSON object, or outside
`flatshare.jsonin`'s limits (nested more than 64 deep, an integer of more than 20 digits, NaN, Infinity
or a number out of range) (400); an object naming a key twice (`"priority": -100, "priority": 50`: the
gateway checks the last value, and a backend that keeps the first would run the other) (400); a string
holding a lone surrogate (`"\\ud800"`: valid JSON, but no UTF-8 text can carry it, so no backend could
read it) (400); `model` or `stream` of the wrong type (400); a completion without `prompt` or a chat
without a non-empty `messages` list (400).
Everything else is the backend's to judge (vLLM's own 400s pass through unchanged). A client that goes
away while sending its body raises `ClientGone`.
"""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass
from typing import Any

from starlette.requests import ClientDisconnect, Request

from flatshare import jsonin
from flatshare.errors import InputError
from flatshare.gateway.errors import GatewayError

_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")


class ClientGone(Exception):
    """The client disconnected before its whole body arrived."""


@dataclass(frozen=True)
class Inbound:
    """A checked request body."""

    raw: bytes
    body: dict[str, Any]
    chat: bool
    stream: bool
    model: str | None


def _too_large(limit: int) -> GatewayError:
    return GatewayError(
        413, f"request body is larger than the gateway's limit of {limit} bytes", "body_too_large"
    )


async def read_body(request: Request, limit: int, timeout_s: float) -> bytes:
    """The whole body, refusing more than `limit` bytes without reading past it, and a body that has not
    arrived whole within `timeout_s` seconds (408: a client sending a byte now and then cannot hold a
    connection and its buffer)."""
    declared = request.headers.get("content-length")
    if (ascii_count(declared, limit) or 0) > limit:
        raise _too_large(limit)
    chunks: list[bytes] = []
    size = 0
    try:
        async with asyncio.timeout(timeout_s):
            async for chunk in request.stream():
                size += len(chunk)
                if size > limit:
                    raise _too_large(limit)
                chunks.append(chunk)
    except ClientDisconnect as exc:
        raise ClientGone() from exc
    except TimeoutError:
        raise GatewayError(
            408, f"the request body did not arrive within {timeout_s:g} s", "body_timeout", "RequestTimeout"
        ) from None
    return b"".join(chunks)


def parse_inbound(raw: bytes, chat: bool) -> Inbound:
    """Decode and check a completion (`chat` False) or chat completion body (module docstring)."""
    body = read_json(raw, "request body")
    if not isinstance(body, dict):
        raise GatewayError(400, "request body must be a JSON object", "bad_json")
    model = body.get("model")
    if model is not None and not isinstance(model, str):
        raise GatewayError(400, f"'model' must be a string, got {model!r}", "bad_request", param="model")
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise GatewayError(
            400, f"'stream' must be true or false, got {stream!r}", "bad_request", param="stream"
        )
    if chat:
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise GatewayError(
                400, "field 'messages' must be a non-empty list", "bad_request", param="messages"
            )
    elif "prompt" not in body:
        raise GatewayError(400, "field 'prompt' is required", "bad_request", param="prompt")
    return Inbound(raw, body, chat, stream, model or None)


def read_json(raw: bytes, what: str) -> Any:
    """`raw` decoded within `jsonin`'s limits and free of lone surrogates; a 400 (`bad_json`) naming
    `what` otherwise. Every JSON body a client sends the gateway is read here."""
    try:
        value = jsonin.loads(raw, what, unique_keys=True)
    except InputError as exc:
        detail = str(exc).removeprefix(f"{what}: ").removeprefix("not valid JSON (").removesuffix(")")
        raise GatewayError(400, f"{what} is not valid JSON: {detail}", "bad_json") from None
    if _SURROGATE_ESCAPE.search(raw) is not None and _has_lone_surrogate(value):
        raise GatewayError(
            400,
            f"{what} is not valid JSON: a string holds a lone UTF-16 surrogate (\\ud800-\\udfff)",
            "bad_json",
        )
    return value


def _has_lone_surrogate(value: Any) -> bool:
    """Whether any string (keys included) in a decoded value cannot be written as UTF-8; no recursion."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                return True
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False


def ascii_count(text: str | None, most: int) -> int | None:
    """A count sent as text (a header): None unless ASCII digits only; capped at `most + 1`, so a
    5,000-digit value costs nothing. (`str.isdigit` alone takes `"²"`, which a latin-1 header can
    carry and `int` refuses.)"""
    if not text or not text.isascii() or not text.isdigit():
        return None
    return most + 1 if len(text) > len(str(most)) else min(int(text), most + 1)
