"""Helpers for replay tests: small hand-built workloads, a fake streaming server behind an httpx mock
transport (no network, exact timing), and a record-file check."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from flatshare.replay.records import ReplayRecord, schema_problems
from flatshare.workloads.model import Session, Workload, WorkloadRequest
from flatshare.workloads.tokens import unique_span

METRICS_TEXT = (
    "# HELP vllm:kv_cache_usage_perc KV-cache usage.\n"
    'vllm:kv_cache_usage_perc{engine="0",model_name="fake"} 0.25\n'
    'vllm:num_requests_running{engine="0",model_name="fake"} 2.0\n'
    'vllm:num_requests_waiting{engine="0",model_name="fake"} 1.0\n'
    'vllm:num_preemptions_total{engine="0",model_name="fake"} 3.0\n'
)


def session(
    sid: str,
    n: int,
    *,
    start_s: float = 0.0,
    pause_s: float = 0.1,
    max_tokens: int = 5,
    prompt: int = 20,
    cls: str = "agent",
    priority: int = 10,
    speech_tokens_per_s: float | None = None,
    first_sentence: int | None = None,
) -> Session:
    """`n` dependent requests `{sid}/{k}`; the first at `start_s`, the rest `pause_s` after a reply."""
    requests = tuple(
        WorkloadRequest(
            id=f"{sid}/{k}",
            session_id=sid,
            cls=cls,
            priority=priority,
            prompt=(unique_span(f"{sid}/{k}", prompt + k),),
            max_tokens=max_tokens,
            pause_before_s=start_s if k == 0 else pause_s,
            first_sentence_tokens=first_sentence,
            vocab_size=512,
        )
        for k in range(n)
    )
    return Session(sid, cls, start_s, requests, speech_tokens_per_s)


def workload(*sessions: Session) -> Workload:
    return Workload("test", tuple(sessions))


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
            return httpx.Response(200, json={"data": [{"id": "fake", "max_model_len": 2048}]})
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
            yield b"data: [DONE]\n\n"
        finally:
            self.in_flight -= 1


def sse(data: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(data).encode() + b"\n\n"


def checked_records(path: Path) -> list[dict[str, Any]]:
    """The decoded lines of a record file, each asserted to pass the schema check."""
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    for row in rows:
        assert schema_problems(row) == [], (row["id"], schema_problems(row))
    return rows


def by_id(records: Sequence[ReplayRecord]) -> dict[str, ReplayRecord]:
    return {r.id: r for r in records}


class Capture:
    """ASGI middleware that keeps every `/v1/completions` body by its `X-Request-Id` header, and the
    ids in the order they came (`arrived`)."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.bodies: dict[str, dict[str, Any]] = {}
        self.arrived: list[str] = []

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["path"] != "/v1/completions":
            await self.app(scope, receive, send)
            return
        parts = []
        while True:
            message = await receive()
            parts.append(message.get("body", b""))
            if not message.get("more_body"):
                break
        body = b"".join(parts)
        request_id = dict(scope["headers"]).get(b"x-request-id", b"").decode()
        self.bodies[request_id] = json.loads(body)
        self.arrived.append(request_id)
        delivered = False

        async def replay() -> Any:
            nonlocal delivered
            if delivered:
                return await receive()
            delivered = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, replay, send)
