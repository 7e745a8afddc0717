"""The ASGI app: vLLM's OpenAI-compatible routes over a `WallClockRunner`.

Routes: `POST /v1/completions`, `POST /v1/chat/completions`, `GET /v1/models`, `GET /health`,
`POST /tokenize`, `GET /metrics`. Refused requests get `{"error": {"message", "type", "param", "code"}}`
with 400 (bad input), 404 (unknown model) or 503 (the engine has failed). A client that goes away,
streaming or not, has its request aborted in the engine (its KV blocks freed), as vLLM does.
"""

from __future__ import annotations

import asyncio
import gc
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from flatshare.serve.openai_format import (
    DONE,
    ResponseMeta,
    error_body,
    error_chunk,
    full_response,
    stream_chunk,
    usage_chunk,
)
from flatshare.serve.protocol import (
    ApiError,
    GenerationRequest,
    ServedModel,
    parse_chat,
    parse_completion,
    parse_json_object,
    parse_tokenize,
)
from flatshare.serve.runner import RequestHandle, WallClockRunner
from flatshare.serve.telemetry import CONTENT_TYPE, ServeMetrics
from flatshare.serve.tokenizer import SimTokenizer

Parser = Callable[[dict[str, Any], SimTokenizer, ServedModel], GenerationRequest]


@dataclass(frozen=True)
class ServeState:
    """Everything the routes use."""

    runner: WallClockRunner
    metrics: ServeMetrics
    tokenizer: SimTokenizer
    served: ServedModel


class SimApi:
    """The route handlers."""

    def __init__(self, state: ServeState) -> None:
        self.state = state
        self.runner = state.runner

    async def completions(self, request: Request) -> Response:
        return await self._generate(request, parse_completion, chat=False)

    async def chat_completions(self, request: Request) -> Response:
        return await self._generate(request, parse_chat, chat=True)

    async def models(self, request: Request) -> Response:
        served = self.state.served
        card = {
            "id": served.name,
            "object": "model",
            "created": int(time.time()),
            "owned_by": "vllm",
            "root": served.name,
            "parent": None,
            "max_model_len": served.max_model_len,
            "permission": [],
        }
        return JSONResponse({"object": "list", "data": [card]})

    async def health(self, request: Request) -> Response:
        if self.runner.failure is not None:
            return _error(ApiError(503, f"engine failed: {self.runner.failure}", "ServiceUnavailableError"))
        return Response(status_code=200)

    async def tokenize(self, request: Request) -> Response:
        body = parse_json_object(await request.body())
        tokens = parse_tokenize(body, self.state.tokenizer, self.state.served)
        max_len = self.state.served.max_model_len
        return JSONResponse(
            {"count": len(tokens), "max_model_len": max_len, "tokens": tokens, "token_strs": None}
        )

    async def metrics(self, request: Request) -> Response:
        text = self.state.metrics.render(self.runner.engine, self.runner.max_lag_s)
        return Response(text, media_type=CONTENT_TYPE)

    # -- generation --------------------------------------------------------------------------------
    async def _generate(self, request: Request, parse: Parser, chat: bool) -> Response:
        gen = parse(parse_json_object(await request.body()), self.state.tokenizer, self.state.served)
        try:
            handle = self.runner.submit(gen.prompt_token_ids, gen.max_tokens, gen.priority)
        except RuntimeError as exc:
            raise ApiError(503, str(exc), "ServiceUnavailableError") from exc
        meta = ResponseMeta.new(("chat" if chat else "") + handle.id, gen.model, chat)
        if gen.stream:
            events = self._stream(handle, meta, gen.include_usage)
            return StreamingResponse(events, media_type="text/event-stream")
        return await self._complete(request, handle, meta)

    async def _stream(
        self, handle: RequestHandle, meta: ResponseMeta, include_usage: bool
    ) -> AsyncIterator[bytes]:
        try:
            if meta.chat:
                yield stream_chunk(meta, "", None, first=True)
            async for delta in handle.deltas():
                if delta.error is not None:
                    yield error_chunk(delta.error)
                    break
                if delta.count or delta.finish_reason:
                    text = self.state.tokenizer.output_text(delta.start, delta.count)
                    yield stream_chunk(meta, text, delta.finish_reason)
            if include_usage:
                yield usage_chunk(meta, handle.prompt_tokens, handle.produced)
            yield DONE
        finally:
            self.runner.abort(handle)  # a no-op once the request has finished

    async def _complete(self, request: Request, handle: RequestHandle, meta: ResponseMeta) -> Response:
        """The whole completion; if the client goes away first, abort the request as vLLM does."""
        collect = asyncio.ensure_future(self._collect(handle))
        gone = asyncio.ensure_future(_disconnected(request))
        try:
            await asyncio.wait({collect, gone}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            gone.cancel()
            if not collect.done():
                collect.cancel()
                self.runner.abort(handle)
        if collect.cancelled():
            return Response(status_code=499)  # nobody is listening; nginx's "client closed request"
        finish_reason, error = collect.result()
        if error is not None:
            return _error(ApiError(500, error, "InternalServerError"))
        text = self.state.tokenizer.output_text(0, handle.produced)
        return JSONResponse(full_response(meta, text, finish_reason, handle.prompt_tokens, handle.produced))

    @staticmethod
    async def _collect(handle: RequestHandle) -> tuple[str | None, str | None]:
        """(finish reason, error) once the request has ended."""
        async for delta in handle.deltas():
            if delta.final:
                return delta.finish_reason, delta.error
        return None, "the request ended without a finish"


async def _disconnected(request: Request) -> None:
    while (await request.receive())["type"] != "http.disconnect":
        pass


def _error(error: ApiError) -> JSONResponse:
    return JSONResponse(error_body(error), status_code=error.status)


async def _api_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ApiError)
    return _error(exc)


def freeze_gc_heap() -> None:
    """Move every object alive now out of the garbage collector's view, as vLLM's server does after
    start-up. With vLLM and torch imported, a full collection otherwise pauses the event loop for
    0.3-0.8 s (measured here), which would show as a stall in every stream."""
    gc.collect()
    gc.freeze()


def build_app(state: ServeState) -> Starlette:
    """The Starlette app; its lifespan freezes the start-up heap and starts and stops the runner."""
    api = SimApi(state)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        freeze_gc_heap()
        await state.runner.start()
        try:
            yield
        finally:
            await state.runner.stop()

    routes = [
        Route("/v1/completions", api.completions, methods=["POST"]),
        Route("/v1/chat/completions", api.chat_completions, methods=["POST"]),
        Route("/v1/models", api.models, methods=["GET"]),
        Route("/health", api.health, methods=["GET"]),
        Route("/tokenize", api.tokenize, methods=["POST"]),
        Route("/metrics", api.metrics, methods=["GET"]),
    ]
    return Starlette(routes=routes, lifespan=lifespan, exception_handlers={ApiError: _api_error})
