"""Helpers for tests that replay workloads (replay, co-location): small hand-built workloads, a capturing ASGI middleware and a record-file
check. The fake streaming server behind an httpx mock transport is `kit.fake_vllm.FakeServer`."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from flatshare.runfiles.records import ReplayRecord, schema_problems
from flatshare.workloads.model import Session, Workload, WorkloadRequest
from flatshare.workloads.tokens import unique_span


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
