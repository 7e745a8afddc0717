"""Fake vLLM backends (no vLLM import) that answer like vLLM: `/metrics` with vLLM's names, `/v1/models`,
and streamed `/v1/completions` as server-sent events.

- `fake_backend_app(FakeState)`: a Starlette app for real HTTP (serve it with `kit.net.ThreadServer`),
  scriptable while it runs (KV use, queue, failures, slow or cut streams); the gateway tests' backend.
- `FakeServer`: a handler for `httpx.MockTransport` (no network, exact timing) with vLLM's continuous
  usage counts; the replay tests' server.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

DONE = b"data: [DONE]\n\n"


def sse(data: dict[str, Any]) -> bytes:
    """One server-sent event carrying `data` as JSON."""
    return b"data: " + json.dumps(data).encode() + b"\n\n"


def metrics_page(
    model: str, kv_usage: float, running: float, waiting: float, preemptions: float | None = None
) -> str:
    """A /metrics page with the gauges (and the preemption counter) vLLM exports for one engine."""
    labels = f'{{engine="0",model_name="{model}"}}'
    lines = [
        "# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.",
        "# TYPE vllm:kv_cache_usage_perc gauge",
        f"vllm:kv_cache_usage_perc{labels} {kv_usage}",
        "# TYPE vllm:num_requests_waiting gauge",
        f"vllm:num_requests_waiting{labels} {waiting}",
        "# TYPE vllm:num_requests_running gauge",
        f"vllm:num_requests_running{labels} {running}",
    ]
    if preemptions is not None:
        lines += [
            "# TYPE vllm:num_preemptions_total counter",
            f"vllm:num_preemptions_total{labels} {preemptions}",
        ]
    return "\n".join(lines) + "\n"


def models_answer(model: str, max_model_len: int | None = None) -> dict[str, Any]:
    """A /v1/models answer listing `model` (with vLLM's `max_model_len` when given)."""
    card: dict[str, Any] = {"id": model, "object": "model"}
    if max_model_len is not None:
        card["max_model_len"] = max_model_len
    return {"object": "list", "data": [card]}


# -- over real HTTP (the gateway's backends) --------------------------------------------------------------
@dataclass
class FakeState:
    """What the fake backend reports and does; tests change it while it runs."""

    model: str = "fake"
    kv_usage: float = 0.0
    waiting: int = 0
    tokens: int = 4
    token_delay_s: float = 0.0
    break_after: int | None = None  # tokens sent before the connection is cut
    break_after_done: bool = False  # cut the connection after `[DONE]`, before the response's end
    status: int = 200
    bodies: list[dict[str, Any]] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)
    clients: set[int] = field(default_factory=set)  # client ports seen: one per connection
    finished: int = 0
    aborted: int = 0
    tokenize_url: str | None = None  # answer /tokenize from this server (the same model's tokenizer)
    reply_delay_s: float = 0.0  # before a non-streaming answer (a request aborted meanwhile is counted)
    # -- a hostile or broken backend (issue 32) --
    metrics_text: str | None = None  # answer /metrics with this page instead of a good one
    models_body: bytes | None = None  # answer /v1/models with these bytes instead
    hang_s: float = 0.0  # completions: wait this long before answering at all (no response head)
    line_end: str = "\n"  # how stream lines end: "\r\n" (sse-starlette's framing) or "\r" are legal SSE
    hold_after_first: threading.Event | None = None  # streams wait (up to 10 s) for it after 1 event
    held_released: list[bool] = field(default_factory=list)  # per held stream: released (not timed out)
    unframed_bytes: int = 0  # streams send this many bytes of one event that never ends, then stop


def fake_backend_app(state: FakeState) -> Starlette:
    """/v1/completions (streaming or not), /metrics with vLLM's names, /health, /v1/models, /tokenize."""

    async def completions(request: Request) -> Response:
        body = await request.json()
        state.bodies.append(body)
        state.headers.append(dict(request.headers))
        state.clients.add(request.client.port if request.client else 0)
        hang_until = time.monotonic() + state.hang_s
        while time.monotonic() < hang_until:  # a hung backend, until the client gives up
            if await request.is_disconnected():
                state.aborted += 1
                return Response(status_code=499)
            await asyncio.sleep(0.02)
        if state.status != 200:
            return JSONResponse({"error": {"message": "fake failure"}}, status_code=state.status)
        if not body.get("stream"):
            deadline = time.monotonic() + state.reply_delay_s
            while time.monotonic() < deadline:
                if await request.is_disconnected():
                    state.aborted += 1
                    return Response(status_code=499)
                await asyncio.sleep(0.01)
            choice = {"index": 0, "text": " x" * state.tokens, "finish_reason": "length"}
            return JSONResponse({"object": "text_completion", "choices": [choice], "model": state.model})
        return StreamingResponse(_events(state), media_type="text/event-stream")

    async def metrics(request: Request) -> Response:
        page = metrics_page(state.model, state.kv_usage, running=1, waiting=state.waiting)
        return Response(
            state.metrics_text if state.metrics_text is not None else page, media_type="text/plain"
        )

    async def health(request: Request) -> Response:
        return Response(status_code=200)

    async def models(request: Request) -> Response:
        if state.models_body is not None:
            return Response(state.models_body, media_type="application/json")
        return JSONResponse(models_answer(state.model))

    async def tokenize(request: Request) -> Response:
        body = await request.json()
        if state.tokenize_url is not None:
            async with httpx.AsyncClient() as client:
                return JSONResponse((await client.post(state.tokenize_url, json=body, timeout=30)).json())
        count = len(str(body.get("prompt", "")).split())
        return JSONResponse({"count": count, "tokens": [], "max_model_len": 4096})

    routes = [
        Route("/v1/completions", completions, methods=["POST"]),
        Route("/metrics", metrics),
        Route("/health", health),
        Route("/v1/models", models),
        Route("/tokenize", tokenize, methods=["POST"]),
    ]
    return Starlette(routes=routes)


def _framed(event: bytes, line_end: str) -> bytes:
    """`event` (LF-framed, as `sse` writes it) with its line ends written as `line_end`."""
    return event.replace(b"\n", line_end.encode())


async def _unframed(size: int) -> AsyncIterator[bytes]:
    """One event that never ends: `size` bytes of a data line with no line end."""
    yield b"data: "
    piece = b"x" * 65536
    for start in range(0, size, len(piece)):
        yield piece[: size - start]
        await asyncio.sleep(0)


async def _held(state: FakeState, hold: threading.Event) -> None:
    """Wait (off the loop) for the test to release a stream after its first event; records whether it did."""
    state.held_released.append(await asyncio.to_thread(hold.wait, 10.0))


async def _events(state: FakeState) -> AsyncIterator[bytes]:
    if state.unframed_bytes:
        async for piece in _unframed(state.unframed_bytes):
            yield piece
        return
    async with contextlib.aclosing(_plain_events(state)) as events:  # closed at once when the client leaves
        async for event in events:
            yield _framed(event, state.line_end)


async def _plain_events(state: FakeState) -> AsyncIterator[bytes]:
    done = False
    try:
        for i in range(state.tokens):
            if i == 1 and state.hold_after_first is not None:
                await _held(state, state.hold_after_first)
            if state.break_after is not None and i == state.break_after:
                yield b'data: {"choices":[{"index":0,"te'  # half an event, then the connection drops
                raise RuntimeError("fake backend dies mid-stream")
            if state.token_delay_s:
                await asyncio.sleep(state.token_delay_s)
            finish = "length" if i == state.tokens - 1 else None
            yield sse({"choices": [{"index": 0, "text": f" t{i}", "finish_reason": finish}]})
        yield DONE
        done = True
        if state.break_after_done:
            raise RuntimeError("fake backend dies after [DONE]")
    finally:
        if done:
            state.finished += 1
        else:
            state.aborted += 1


# -- behind httpx.MockTransport (the replay driver's server) ----------------------------------------------
METRICS_TEXT = metrics_page("fake", kv_usage=0.25, running=2.0, waiting=1.0, preemptions=3.0)


@dataclass
class FakeServer:
    """A vLLM-like streaming server for `httpx.MockTransport`: after `ttft_s`, one chunk per token every
    `itl_s` with continuous usage, the finish reason on the last, a usage chunk, then `[DONE]`.

    `cut_after`: stop the stream after that many tokens, without `[DONE]`. `status`: answer every
    completion with this HTTP error instead. `bodies`: request id -> decoded body, as received."""

    ttft_s: float = 0.02
    itl_s: float = 0.005
    cut_after: int | None = None
    status: int = 200
    bodies: dict[str, dict[str, Any]] = field(default_factory=dict)
    headers: dict[str, dict[str, str]] = field(default_factory=dict)
    in_flight: int = 0
    max_in_flight: int = 0
    hosts: list[str] = field(default_factory=list)

    def transport(self) -> httpx.MockTransport:
        return httpx.MockTransport(self.handle)

    async def handle(self, request: httpx.Request) -> httpx.Response:
        if request.url.path == "/metrics":
            return httpx.Response(200, text=METRICS_TEXT)
        if request.url.path == "/v1/models":
            return httpx.Response(200, json=models_answer("fake", max_model_len=2048))
        body = json.loads(request.content)
        request_id = request.headers["x-request-id"]
        self.bodies[request_id] = body
        self.headers[request_id] = dict(request.headers)
        self.hosts.append(request.url.netloc.decode())
        if self.status != 200:
            error = {"error": {"message": "no room", "type": "X", "param": None, "code": self.status}}
            return httpx.Response(self.status, json=error)
        return httpx.Response(200, content=self._stream(body["max_tokens"]))

    async def _stream(self, n: int) -> AsyncIterator[bytes]:
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            await asyncio.sleep(self.ttft_s)
            for k in range(1, n + 1):
                if self.cut_after is not None and k > self.cut_after:
                    return
                choice = {"index": 0, "text": f" w{k}", "finish_reason": "length" if k == n else None}
                yield sse({"choices": [choice], "usage": {"completion_tokens": k}})
                if k < n:
                    await asyncio.sleep(self.itl_s)
            yield sse({"choices": [], "usage": {"completion_tokens": n}})
            yield DONE
        finally:
            self.in_flight -= 1
