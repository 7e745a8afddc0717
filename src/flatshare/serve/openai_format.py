"""Response bodies in the shapes vLLM's OpenAI-compatible server sends.

Streaming is server-sent events: `data: {json chunk}\\n\\n` per chunk, the finish reason on the chunk
with the last text, an optional usage-only chunk (`stream_options.include_usage`), then `data: [DONE]`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from flatshare.protocol.sse import DONE_EVENT, encode_event
from flatshare.serve.protocol import ApiError

DONE = DONE_EVENT


@dataclass(frozen=True)
class ResponseMeta:
    """What every chunk of one response repeats."""

    id: str
    model: str
    chat: bool
    created: int

    @classmethod
    def new(cls, request_id: str, model: str, chat: bool) -> ResponseMeta:
        return cls(request_id, model, chat, int(time.time()))

    def envelope(self, choices: list[dict[str, Any]], stream: bool) -> dict[str, Any]:
        kind = ("chat.completion" if self.chat else "text_completion") + (
            ".chunk" if self.chat and stream else ""
        )
        return {
            "id": self.id,
            "object": kind,
            "created": self.created,
            "model": self.model,
            "choices": choices,
        }


def usage(prompt_tokens: int, completion_tokens: int) -> dict[str, int]:
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }


def stream_chunk(meta: ResponseMeta, text: str, finish_reason: str | None, first: bool = False) -> bytes:
    """One streamed chunk carrying `text` (chat: a `delta`, with the role on the first chunk)."""
    if meta.chat:
        delta: dict[str, Any] = {"role": "assistant", "content": text} if first else {"content": text}
        choice: dict[str, Any] = {
            "index": 0,
            "delta": delta,
            "logprobs": None,
            "finish_reason": finish_reason,
        }
    else:
        choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish_reason}
    choice["stop_reason"] = None
    return encode_event(meta.envelope([choice], stream=True))


def usage_chunk(meta: ResponseMeta, prompt_tokens: int, completion_tokens: int) -> bytes:
    return encode_event({**meta.envelope([], stream=True), "usage": usage(prompt_tokens, completion_tokens)})


def error_chunk(message: str) -> bytes:
    return encode_event(error_body(ApiError(500, message, "InternalServerError")))


def full_response(
    meta: ResponseMeta, text: str, finish_reason: str | None, prompt_tokens: int, completion_tokens: int
) -> dict[str, Any]:
    """A non-streaming completion or chat completion."""
    if meta.chat:
        message = {"role": "assistant", "content": text}
        choice: dict[str, Any] = {
            "index": 0,
            "message": message,
            "logprobs": None,
            "finish_reason": finish_reason,
        }
    else:
        choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish_reason}
    choice["stop_reason"] = None
    return {**meta.envelope([choice], stream=False), "usage": usage(prompt_tokens, completion_tokens)}


def error_body(error: ApiError) -> dict[str, Any]:
    return {
        "error": {
            "message": error.message,
            "type": error.err_type,
            "param": error.param,
            "code": error.status,
        }
    }
