"""Validating OpenAI-style request bodies into typed requests for the simulated engine.

Completions take `prompt` as a string, a list of token ids, or a list holding one of either. Chat takes
`messages`, turned into text by the template below. Both take `max_tokens` (chat also
`max_completion_tokens`; default 16, as OpenAI's completions API, since the simulated model never stops
early), `stream`, `stream_options.include_usage`, `priority` (vLLM's meaning: lower runs first; only
with the priority policy, as vLLM) and `model` (the served name or absent). `n` must be 1. Other fields
are accepted and ignored, as vLLM ignores fields it does not know.

Chat template: each message becomes `"{role}: {content}\\n"` (content a string, or a list of parts of
which the `text` ones are joined), then `"assistant:"` is appended, like a generation prompt.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from flatshare.serve.tokenizer import SimTokenizer

DEFAULT_MAX_TOKENS = 16


class ApiError(Exception):
    """A request the server refuses; becomes an OpenAI-style JSON error with `status`."""

    def __init__(
        self, status: int, message: str, err_type: str = "BadRequestError", param: str | None = None
    ):
        super().__init__(message)
        self.status = status
        self.message = message
        self.err_type = err_type
        self.param = param


@dataclass(frozen=True)
class ServedModel:
    """What the server checks requests against."""

    name: str
    max_model_len: int
    priority_enabled: bool


@dataclass(frozen=True)
class GenerationRequest:
    """A validated completion or chat request."""

    prompt_token_ids: tuple[int, ...]
    max_tokens: int
    priority: int
    stream: bool
    include_usage: bool
    model: str


def bad_request(message: str, param: str | None = None) -> ApiError:
    return ApiError(400, message, "BadRequestError", param)


def parse_json_object(raw: bytes) -> dict[str, Any]:
    """Decode a request body; it must be a JSON object."""
    try:
        body = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise bad_request(f"request body is not valid JSON: {exc}") from exc
    if not isinstance(body, dict):
        raise bad_request("request body must be a JSON object")
    return body


def check_model(body: Mapping[str, Any], served: ServedModel) -> str:
    """The requested model name; 404 like vLLM when it is not the served one."""
    model = body.get("model")
    if model is None or model == "":
        return served.name
    if model != served.name:
        raise ApiError(404, f"The model `{model}` does not exist.", "NotFoundError", "model")
    return served.name


def parse_completion(
    body: Mapping[str, Any], tokenizer: SimTokenizer, served: ServedModel
) -> GenerationRequest:
    model = check_model(body, served)
    if "prompt" not in body:
        raise bad_request("field 'prompt' is required", "prompt")
    ids = completion_prompt_ids(body["prompt"], tokenizer)
    return _generation(body, ids, _int_or_none(body, "max_tokens"), served, model)


def parse_chat(body: Mapping[str, Any], tokenizer: SimTokenizer, served: ServedModel) -> GenerationRequest:
    model = check_model(body, served)
    ids = tokenizer.encode(chat_prompt(body.get("messages")))
    max_tokens = _int_or_none(body, "max_completion_tokens")
    if max_tokens is None:
        max_tokens = _int_or_none(body, "max_tokens")
    return _generation(body, ids, max_tokens, served, model)


def parse_tokenize(body: Mapping[str, Any], tokenizer: SimTokenizer, served: ServedModel) -> list[int]:
    """vLLM's /tokenize: `{"prompt": str}` or `{"messages": [...]}` (with the generation prompt)."""
    check_model(body, served)
    if "prompt" in body:
        prompt = body["prompt"]
        if not isinstance(prompt, str):
            raise bad_request("field 'prompt' must be a string", "prompt")
        return tokenizer.encode(prompt)
    if "messages" in body:
        return tokenizer.encode(chat_prompt(body["messages"]))
    raise bad_request("give 'prompt' (a string) or 'messages'", "prompt")


def completion_prompt_ids(prompt: Any, tokenizer: SimTokenizer) -> list[int]:
    """Token ids of a completions `prompt` (see the module docstring for the accepted shapes)."""
    if isinstance(prompt, list) and prompt and isinstance(prompt[0], str | list):
        if len(prompt) != 1:
            raise bad_request(f"only one prompt per request is supported, got {len(prompt)}", "prompt")
        prompt = prompt[0]
    if isinstance(prompt, str):
        ids = tokenizer.encode(prompt)
    elif isinstance(prompt, list) and all(isinstance(x, int) and not isinstance(x, bool) for x in prompt):
        ids = list(prompt)
        bad = [x for x in ids if not 0 <= x < tokenizer.vocab_size]
        if bad:
            raise bad_request(
                f"token id {bad[0]} is out of vocabulary (0..{tokenizer.vocab_size - 1})", "prompt"
            )
    else:
        raise bad_request(
            "'prompt' must be a string, a list of token ids, or a list with one of either", "prompt"
        )
    if not ids:
        raise bad_request("the prompt is empty (no tokens)", "prompt")
    return ids


def chat_prompt(messages: Any) -> str:
    """The chat template: `"{role}: {content}\\n"` per message, then `"assistant:"`."""
    if not isinstance(messages, list) or not messages:
        raise bad_request("field 'messages' must be a non-empty list of messages", "messages")
    lines = []
    for i, message in enumerate(messages):
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            raise bad_request(f"messages[{i}] must be an object with a string 'role'", "messages")
        lines.append(f"{message['role']}: {_content_text(message.get('content'), i)}\n")
    return "".join(lines) + "assistant:"


def _content_text(content: Any, i: int) -> str:
    if content is None or isinstance(content, str):
        return content or ""
    if isinstance(content, list) and all(isinstance(part, dict) for part in content):
        return "".join(str(part.get("text", "")) for part in content if part.get("type") == "text")
    raise bad_request(f"messages[{i}].content must be a string or a list of content parts", "messages")


def _int_or_none(body: Mapping[str, Any], name: str) -> int | None:
    value = body.get(name)
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool):
        raise bad_request(f"'{name}' must be an integer, got {value!r}", name)
    return value


def _generation(
    body: Mapping[str, Any], ids: list[int], max_tokens: int | None, served: ServedModel, model: str
) -> GenerationRequest:
    if max_tokens is None:
        max_tokens = DEFAULT_MAX_TOKENS
    if max_tokens < 1:
        raise bad_request(f"max_tokens must be at least 1, got {max_tokens}.", "max_tokens")
    _check_length(len(ids), max_tokens, served.max_model_len)
    priority = _int_or_none(body, "priority") or 0
    if priority != 0 and not served.priority_enabled:
        raise bad_request(f"Got priority {priority} but Priority scheduling is not enabled.", "priority")
    n = _int_or_none(body, "n")
    if n not in (None, 1):
        raise bad_request(f"only n=1 is supported, got n={n}", "n")
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise bad_request(f"'stream' must be true or false, got {stream!r}", "stream")
    options = body.get("stream_options") or {}
    if not isinstance(options, dict):
        raise bad_request("'stream_options' must be an object", "stream_options")
    include_usage = bool(options.get("include_usage", False))
    return GenerationRequest(tuple(ids), max_tokens, priority, stream, include_usage, model)


def _check_length(prompt_len: int, max_tokens: int, max_model_len: int) -> None:
    if prompt_len > max_model_len:
        raise bad_request(
            f"This model's maximum context length is {max_model_len} tokens. However, your prompt contains "
            f"{prompt_len} input tokens, which exceeds this limit even without any output tokens. "
            "Please reduce the length of the input prompt.",
            "input_tokens",
        )
    if prompt_len + max_tokens > max_model_len:
        raise bad_request(
            f"This model's maximum context length is {max_model_len} tokens. However, you requested "
            f"{max_tokens} output tokens and your prompt contains {prompt_len} input tokens, for a total of "
            f"{prompt_len + max_tokens} tokens. Please reduce the length of the input prompt or the number "
            "of requested output tokens.",
            "max_tokens",
        )
