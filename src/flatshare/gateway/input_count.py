"""Counting a request's input tokens, the second signal of the threshold rule.

- Token-id prompts (`"prompt": [1, 2, 3]`) are counted exactly, for free.
- Otherwise the estimate comes first: `ceil(UTF-8 bytes / 4)` for text (English prose runs at 3.5-4.5
  bytes per token with Llama-3-style tokenizers; CJK text, 3 bytes a character and about 1 token each,
  is *under*estimated by about a quarter), plus `CHAT_MESSAGE_OVERHEAD` tokens per chat message for the
  template's role markers.
- When `tokens.source` is `backend` or `local` and the estimate is at least `tokens.exact_min_estimate`,
  the exact count replaces it: the backend's `POST /tokenize` (vLLM's; with `messages` for chat, so the
  chat template is counted) or a local `tokenizer.json` (`tokenizers` library; chat messages are
  encoded as `"{role}: {content}\\n"` lines, not through the model's template). If that fails or times
  out, the estimate stands and the count says why (`error`).

So short requests, which the rule never moves, do not wait for a tokenizer round-trip.
"""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from flatshare.gateway.config import TokenConfig
from flatshare.gateway.upstream import Upstream, UpstreamError

BYTES_PER_TOKEN = 4
CHAT_MESSAGE_OVERHEAD = 4


@dataclass(frozen=True)
class TokenCount:
    """Input tokens and where the number came from: `ids`, `backend`, `local` or `estimate`."""

    tokens: int
    source: str
    error: str = ""


def estimate_text(text: str) -> int:
    return math.ceil(len(text.encode("utf-8")) / BYTES_PER_TOKEN)


def _is_ids(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(x, int) and not isinstance(x, bool) for x in value)


def message_text(message: Any) -> str:
    """The text of one chat message (string content, or the `text` parts of a list)."""
    if not isinstance(message, dict):
        return ""
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            str(p.get("text", "")) for p in content if isinstance(p, dict) and p.get("type") == "text"
        )
    return ""


def estimate(body: Mapping[str, Any], chat: bool) -> TokenCount:
    """The free count: exact for token ids, else the byte estimate (module docstring)."""
    if chat:
        messages = body.get("messages")
        messages = messages if isinstance(messages, list) else []
        tokens = sum(estimate_text(message_text(m)) + CHAT_MESSAGE_OVERHEAD for m in messages)
        return TokenCount(tokens, "estimate")
    prompt = body.get("prompt")
    if isinstance(prompt, list) and _is_ids(prompt):
        return TokenCount(len(prompt), "ids")
    if isinstance(prompt, list) and prompt and all(_is_ids(p) for p in prompt):
        return TokenCount(sum(len(p) for p in prompt), "ids")
    if isinstance(prompt, list):
        return TokenCount(sum(estimate_text(p) for p in prompt if isinstance(p, str)), "estimate")
    return TokenCount(estimate_text(prompt) if isinstance(prompt, str) else 0, "estimate")


def _single_text(body: Mapping[str, Any]) -> str | None:
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1:
        prompt = prompt[0]
    return prompt if isinstance(prompt, str) else None


class TokenCounter:
    """Counts input tokens per `TokenConfig` (module docstring)."""

    def __init__(self, config: TokenConfig, client: Upstream) -> None:
        self.config = config
        self.client = client
        self._local: Callable[[str], int] | None = None
        if config.source == "local":
            self._local = _load_local(config.tokenizer_file)

    async def count(
        self, body: Mapping[str, Any], chat: bool, model: str | None, backend_url: Callable[[], str | None]
    ) -> TokenCount:
        """The count for one request; `backend_url()` names the server to ask, when one is needed."""
        first = estimate(body, chat)
        if first.source == "ids" or self.config.source == "estimate":
            return first
        if first.tokens < self.config.exact_min_estimate:
            return first
        try:
            if self._local is not None:
                return TokenCount(await asyncio.to_thread(self._local_count, body, chat), "local")
            url = backend_url()
            if url is not None:
                return TokenCount(await self._backend_count(body, chat, model, url), "backend")
        except (UpstreamError, ValueError, KeyError, TypeError) as exc:
            return TokenCount(first.tokens, "estimate", f"{type(exc).__name__}: {exc}")
        return TokenCount(first.tokens, "estimate", "no backend to ask")

    def _local_count(self, body: Mapping[str, Any], chat: bool) -> int:
        assert self._local is not None
        if chat:
            messages = body.get("messages") or []
            lines = [f"{m.get('role', '')}: {message_text(m)}\n" for m in messages if isinstance(m, dict)]
            return self._local("".join(lines))
        text = _single_text(body)
        if text is None:
            raise ValueError("only a single text prompt can be tokenized")
        return self._local(text)

    async def _backend_count(
        self, body: Mapping[str, Any], chat: bool, model: str | None, backend_url: str
    ) -> int:
        request: dict[str, Any] = {} if model is None else {"model": model}
        if chat:
            request["messages"] = body.get("messages")
        else:
            text = _single_text(body)
            if text is None:
                raise ValueError("only a single text prompt can be tokenized")
            request["prompt"] = text
        status, answer = await self.client.fetch(f"{backend_url}/tokenize", self.config.timeout_s, request)
        if status != 200:
            raise ValueError(f"/tokenize answered {status}")
        return int(json.loads(answer)["count"])


def _load_local(path: str) -> Callable[[str], int]:
    try:
        from tokenizers import Tokenizer
    except ImportError as exc:  # pragma: no cover - tokenizers comes with vLLM and the dev extra
        raise ValueError("tokens.source local needs the `tokenizers` package") from exc
    tokenizer = Tokenizer.from_file(path)
    return lambda text: len(tokenizer.encode(text).ids)
