"""`flatshare warmup`: load each protected prefix into a server's KV cache before traffic.

A voice agent's first turn after a server starts computes its whole system prompt (4,000 tokens in the
co-location experiment: 0.6 s before its first token, a late turn). Sending each shared prefix once, with
`max_tokens` 1, before any caller is routed to the server leaves its blocks in vLLM's prefix cache (and its
CPU tier), so that first turn reads them like every later one. The prompts are:

- `--prompt-file F` (repeatable): a system prompt's text, sent as the system message of a chat completion
  (`--api chat`, what a chat-based voice agent sends: the chat template's tokens before and around it match
  the agent's own requests up to the first user message) or as a completion's prompt (`--api completions`).
- `--workload SPEC`: the shared prefix of every prefix group among the workload's protected requests
  (`flatshare.workloads.warmup`), as token ids, the way `flatshare replay` sends its prompts.

Requests go one after another; a failed one is an error, so a deployment's start-up hook fails
loudly (exit 2) rather than leaving the first caller a cold cache.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import httpx

from flatshare import httpclient, jsonin
from flatshare.errors import InputError
from flatshare.protocol.models import PATH as MODELS_PATH
from flatshare.protocol.models import first_model

Api = Literal["chat", "completions"]
PATHS = {"chat": "/v1/chat/completions", "completions": "/v1/completions"}
MAX_PROMPT_BYTES = 4 << 20


@dataclass(frozen=True)
class WarmupPrompt:
    """One prefix to load: its name (a file, a prefix group), the API path and the request body's fields
    besides `model`."""

    name: str
    path: str
    fields: dict[str, Any]


@dataclass(frozen=True)
class WarmupResult:
    name: str
    prompt_tokens: int | None
    cached_tokens: int | None
    seconds: float

    def line(self) -> str:
        cached = "" if self.cached_tokens is None else f", {self.cached_tokens} already cached"
        return f"{self.name}: {self.prompt_tokens} prompt tokens{cached}, {self.seconds:.2f} s"


def file_prompts(paths: Sequence[Path], api: Api, priority: int | None) -> list[WarmupPrompt]:
    """One prompt per file (its text; InputError for an empty, unreadable or oversized file)."""
    prompts = []
    for path in paths:
        text = jsonin.read_text(path, MAX_PROMPT_BYTES)
        if not text.strip():
            raise InputError(f"{path}: empty prompt file")
        if api == "chat":
            fields: dict[str, Any] = {"messages": [{"role": "system", "content": text}]}
        else:
            fields = {"prompt": text}
        prompts.append(WarmupPrompt(str(path), PATHS[api], _common(fields, priority)))
    return prompts


def workload_prompts(spec: str, seed: int, vocab_size: int, protect_priority: int) -> list[WarmupPrompt]:
    """The shared prefixes of the workload's protected requests, as token-id completions at their
    priority (InputError for a bad spec, or a workload whose protected requests share none)."""
    from flatshare.workloads.spec import parse_spec
    from flatshare.workloads.warmup import protected_prefixes

    workload = parse_spec(spec, seed, vocab_size=vocab_size)
    prefixes = protected_prefixes(workload, protect_priority)
    if not prefixes:
        raise InputError(
            f"--workload {spec!r}: no request at priority <= {protect_priority} has a shared prefix"
        )
    return [
        WarmupPrompt(
            f"group {p.group}", PATHS["completions"], _common({"prompt": list(p.token_ids)}, p.priority)
        )
        for p in prefixes
    ]


def _common(fields: dict[str, Any], priority: int | None) -> dict[str, Any]:
    common: dict[str, Any] = {"max_tokens": 1, "temperature": 0, "stream": False}
    if priority is not None:
        common["priority"] = priority
    return {**fields, **common}


def warm(
    endpoint: str, prompts: Sequence[WarmupPrompt], model: str | None = None, timeout_s: float = 600.0
) -> list[WarmupResult]:
    """Send each prompt once to `endpoint` (its first model unless `model`); InputError naming the prompt
    and the server's answer when one fails."""
    base = endpoint.rstrip("/")
    with httpclient.client(httpx.Timeout(timeout_s, connect=10.0)) as client:
        name = model or _first_model(client, base)
        return [_send(client, base, name, prompt) for prompt in prompts]


def _first_model(client: httpx.Client, base: str) -> str:
    try:
        response = client.get(f"{base}{MODELS_PATH}")
        response.raise_for_status()
        return first_model(response.json())[0]
    except (httpx.HTTPError, ValueError, KeyError, IndexError) as exc:
        raise InputError(f"{base}{MODELS_PATH}: no model to warm up ({exc})") from exc


def _send(client: httpx.Client, base: str, model: str, prompt: WarmupPrompt) -> WarmupResult:
    start = time.monotonic()
    try:
        response = client.post(f"{base}{prompt.path}", json={"model": model, **prompt.fields})
    except httpx.HTTPError as exc:
        raise InputError(f"{prompt.name}: {base}{prompt.path} failed: {exc!r}") from exc
    seconds = time.monotonic() - start
    if response.status_code != 200:
        raise InputError(
            f"{prompt.name}: HTTP {response.status_code} from {base}{prompt.path}: {response.text[:500]}"
        )
    usage = _usage(response)
    details = usage.get("prompt_tokens_details") or {}
    return WarmupResult(
        prompt.name,
        _int(usage.get("prompt_tokens")),
        _int(details.get("cached_tokens")) if isinstance(details, dict) else None,
        seconds,
    )


def _usage(response: httpx.Response) -> dict[str, Any]:
    try:
        body = response.json()
    except ValueError:
        return {}
    usage = body.get("usage") if isinstance(body, dict) else None
    return usage if isinstance(usage, dict) else {}


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None
