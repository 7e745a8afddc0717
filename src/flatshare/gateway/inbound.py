"""Reading and checking a client's request before anything is sent upstream.

Refused here, each with a 4xx OpenAI-style error naming the problem: a body over `max_body_bytes` (413,
checked against Content-Length first, then while reading); a body that is not JSON or not a JSON object
(400); `model` or `stream` of the wrong type (400); a completion without `prompt` or a chat without a
non-empty `messages` list (400). Everything else is the backend's to judge (vLLM's own 400s pass
through unchanged).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from starlette.requests import Request

from flatshare.gateway.errors import GatewayError


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


async def read_body(request: Request, limit: int) -> bytes:
    """The whole body, refusing more than `limit` bytes without reading past it."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise _too_large(limit)
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise _too_large(limit)
        chunks.append(chunk)
    return b"".join(chunks)


def parse_inbound(raw: bytes, chat: bool) -> Inbound:
    """Decode and check a completion (`chat` False) or chat completion body (module docstring)."""
    try:
        body = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise GatewayError(400, f"request body is not valid JSON: {exc}", "bad_json") from exc
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
