"""Helpers for gateway tests: apps served on free loopback ports in threads, a scriptable fake vLLM
backend (no vLLM import), serve-sim backends as subprocesses, SSE reading and /metrics scraping."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from typing import Any

import httpx
import uvicorn
from prometheus_client.parser import text_string_to_metric_families
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from flatshare.gateway.app import Gateway, build_gateway
from flatshare.gateway.config import BackendConfig, GatewayConfig, PollConfig, TokenConfig


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class ThreadServer:
    """Serve an ASGI app on 127.0.0.1 in a daemon thread (uvicorn, lifespan on), on a socket bound
    before the thread starts (no window for another process to take the port)."""

    def __init__(
        self, app: Any, graceful_s: int = 2, keep_alive_s: int = 5, log_level: str = "warning"
    ) -> None:
        self.socket = socket.socket()
        self.socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.socket.bind(("127.0.0.1", 0))
        self.port = int(self.socket.getsockname()[1])
        self.url = f"http://127.0.0.1:{self.port}"
        config = uvicorn.Config(
            app,
            log_level=log_level,
            lifespan="on",
            timeout_graceful_shutdown=graceful_s,
            timeout_keep_alive=keep_alive_s,
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.socket]}, daemon=True)

    def __enter__(self) -> ThreadServer:
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            assert self.thread.is_alive() and time.monotonic() < deadline, "server did not start"
            time.sleep(0.01)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(10)
        self.socket.close()


# -- a scriptable fake vLLM -------------------------------------------------------------------------------
@dataclass
class FakeState:
    """What the fake backend reports and does; tests change it while it runs."""

    model: str = "fake"
    kv_usage: float = 0.0
    waiting: int = 0
    tokens: int = 4
    token_delay_s: float = 0.0
    break_after: int | None = None  # tokens sent before the connection is cut
    status: int = 200
    bodies: list[dict[str, Any]] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)
    clients: set[int] = field(default_factory=set)  # client ports seen: one per connection
    finished: int = 0
    aborted: int = 0
    tokenize_url: str | None = None  # answer /tokenize from this server (the same model's tokenizer)
    reply_delay_s: float = 0.0  # before a non-streaming answer (a request aborted meanwhile is counted)


def fake_backend_app(state: FakeState) -> Starlette:
    """/v1/completions (streaming or not), /metrics with vLLM's names, /health, /v1/models, /tokenize."""

    async def completions(request: Request) -> Response:
        body = await request.json()
        state.bodies.append(body)
        state.headers.append(dict(request.headers))
        state.clients.add(request.client.port if request.client else 0)
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
        lines = [
            "# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.",
            "# TYPE vllm:kv_cache_usage_perc gauge",
            f'vllm:kv_cache_usage_perc{{engine="0",model_name="{state.model}"}} {state.kv_usage}',
            "# TYPE vllm:num_requests_waiting gauge",
            f'vllm:num_requests_waiting{{engine="0",model_name="{state.model}"}} {state.waiting}',
            "# TYPE vllm:num_requests_running gauge",
            f'vllm:num_requests_running{{engine="0",model_name="{state.model}"}} 1',
        ]
        return Response("\n".join(lines) + "\n", media_type="text/plain")

    async def health(request: Request) -> Response:
        return Response(status_code=200)

    async def models(request: Request) -> Response:
        return JSONResponse({"object": "list", "data": [{"id": state.model, "object": "model"}]})

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


async def _events(state: FakeState) -> AsyncIterator[bytes]:
    done = False
    try:
        for i in range(state.tokens):
            if state.break_after is not None and i == state.break_after:
                yield b'data: {"choices":[{"index":0,"te'  # half an event, then the connection drops
                raise RuntimeError("fake backend dies mid-stream")
            if state.token_delay_s:
                await asyncio.sleep(state.token_delay_s)
            finish = "length" if i == state.tokens - 1 else None
            chunk = {"choices": [{"index": 0, "text": f" t{i}", "finish_reason": finish}]}
            yield b"data: " + json.dumps(chunk).encode() + b"\n\n"
        yield b"data: [DONE]\n\n"
        done = True
    finally:
        if done:
            state.finished += 1
        else:
            state.aborted += 1


# -- the gateway ------------------------------------------------------------------------------------------
FAST_POLL = PollConfig(interval_s=0.05, timeout_s=0.5, stale_after_s=0.5, unhealthy_after_failures=2)


def gateway_config(urls: list[str], **changes: Any) -> GatewayConfig:
    """A gateway over `urls` (backends named b0, b1, ...) polling fast, counting tokens by estimate."""
    backends = tuple(BackendConfig(url, f"b{i}") for i, url in enumerate(urls))
    defaults: dict[str, Any] = {"poll": FAST_POLL, "tokens": TokenConfig(source="estimate")}
    return GatewayConfig(backends=backends, **{**defaults, **changes})


@contextmanager
def running_gateway(config: GatewayConfig) -> Iterator[tuple[Gateway, str]]:
    gateway = build_gateway(config)
    with ThreadServer(gateway.app) as server:
        yield gateway, server.url


def wait_for(predicate: Any, timeout_s: float = 5.0, what: str | Callable[[], str] = "condition") -> None:
    """Poll `predicate` until true; `what` (a string, or a function called on failure) names it."""
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out waiting for {what() if callable(what) else what}")
        time.sleep(0.02)


def backend_rows(url: str) -> dict[str, dict[str, Any]]:
    rows = httpx.get(f"{url}/gateway/backends", timeout=5).json()["backends"]
    return {row["name"]: row for row in rows}


def scrape(url: str) -> dict[str, float]:
    """`name{label=value,...}` -> value for every sample on a /metrics page."""
    values: dict[str, float] = {}
    for family in text_string_to_metric_families(httpx.get(f"{url}/metrics", timeout=5).text):
        for sample in family.samples:
            labels = ",".join(f"{k}={v}" for k, v in sorted(sample.labels.items()))
            values[f"{sample.name}{{{labels}}}"] = sample.value
    return values


def read_events(response: httpx.Response) -> list[str]:
    """The `data:` payloads of a streamed response."""
    return [line.removeprefix("data: ") for line in response.iter_lines() if line.startswith("data: ")]


# -- serve-sim as a process -------------------------------------------------------------------------------
@dataclass
class SimProcess:
    process: subprocess.Popen[bytes]
    url: str
    log: Any

    @property
    def pid(self) -> int:
        return self.process.pid


@contextmanager
def serve_sim_processes(count: int, *args: str) -> Iterator[list[SimProcess]]:
    """`count` `flatshare serve-sim` processes started together; stopped (SIGTERM, by pid) at the end."""
    procs: list[SimProcess] = []
    with ExitStack() as logs:
        try:
            for _ in range(count):
                port = free_port()
                cmd = [sys.executable, "-m", "flatshare.cli", "serve-sim", "--port", str(port), *args]
                log = logs.enter_context(tempfile.TemporaryFile())
                proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=log)
                procs.append(SimProcess(proc, f"http://127.0.0.1:{port}", log))
            for sim in procs:
                _wait_healthy(sim)
            yield procs
        finally:
            for sim in procs:
                _stop(sim)


def _stop(sim: SimProcess) -> None:
    if sim.process.poll() is None:
        os.kill(sim.pid, signal.SIGTERM)
    try:
        sim.process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        os.kill(sim.pid, signal.SIGKILL)
        sim.process.wait(timeout=10)


def _wait_healthy(sim: SimProcess, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        if sim.process.poll() is not None:
            sim.log.seek(0)
            raise AssertionError(f"serve-sim exited: {sim.log.read().decode()[-2000:]}")
        try:
            if httpx.get(f"{sim.url}/health", timeout=1).status_code == 200:
                return
        except httpx.TransportError:
            pass
        assert time.monotonic() < deadline, "serve-sim did not become healthy"
        time.sleep(0.3)


@contextmanager
def sim_backends(count: int, **engine: Any) -> Iterator[list[str]]:
    """`count` in-process serve-sim servers (imports vLLM); yields their URLs."""
    from flatshare.serve.server import build_sim_app
    from flatshare.sim.config import EngineConfig
    from flatshare.sim.profile import load_profile

    with ExitStack() as stack:
        urls = []
        for _ in range(count):
            app = build_sim_app(EngineConfig(**engine), load_profile(), seed=0)
            urls.append(stack.enter_context(ThreadServer(app)).url)
        yield urls
