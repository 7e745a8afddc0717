"""Replaying through a flatshare gateway: the backend named by `x-flatshare-backend` becomes the record's
`engine`, the caller sees every answer's headers, and `/metrics` scraping can be turned off."""

from __future__ import annotations

import asyncio

import httpx

from flatshare.replay.endpoints import Endpoint
from flatshare.replay.ledger import Ledger
from flatshare.replay.wallclock import WallClockOptions, run_wallclock
from flatshare.runfiles.records import schema_problems
from kit.fake_vllm import FakeServer
from kit.replay import session, workload

GATEWAY = Endpoint("http://gw:8080", "fake")


def test_records_name_the_backend_the_gateway_chose() -> None:
    server = FakeServer()
    paths: list[str] = []

    async def handle(request: httpx.Request) -> httpx.Response:
        paths.append(request.url.path)
        answer = await server.handle(request)
        request_id = request.headers.get("x-request-id", "")
        if request_id.endswith("/1"):  # the second request of each session: no routing header
            return answer
        answer.headers["x-flatshare-backend"] = "gpu1" if request_id.startswith("b") else "gpu0"
        answer.headers["x-flatshare-reason"] = "round_robin"
        return answer

    seen: dict[str, str | None] = {}
    ledger = Ledger()
    options = WallClockOptions(sample_metrics=False)
    work = workload(session("a", 2, pause_s=0.01), session("b", 2, pause_s=0.01))

    def on_response(request_id: str, headers: httpx.Headers) -> None:
        seen[request_id] = headers.get("x-flatshare-reason")

    transport = httpx.MockTransport(handle)
    asyncio.run(run_wallclock(work, [GATEWAY], ledger, options, transport=transport, on_response=on_response))
    engines = {rid: r.engine for rid, r in ledger.records.items()}
    assert engines == {"a/0": "gpu0", "a/1": GATEWAY.url, "b/0": "gpu1", "b/1": GATEWAY.url}
    assert seen == {"a/0": "round_robin", "a/1": None, "b/0": "round_robin", "b/1": None}
    assert "/metrics" not in paths and ledger.samples == []
    assert all(schema_problems(r.to_json()) == [] for r in ledger.records.values())


def test_session_headers_name_each_requests_session_and_a_voice_turns_first_sentence() -> None:
    server = FakeServer()
    voice = session(
        "call", 2, pause_s=0.01, cls="voice", priority=0, speech_tokens_per_s=500, first_sentence=3
    )
    work = workload(voice, session("agent", 1))
    for on in (False, True):
        server.headers.clear()
        options = WallClockOptions(sample_metrics=False, session_headers=on)
        asyncio.run(run_wallclock(work, [GATEWAY], Ledger(), options, transport=server.transport()))
        sent = {
            rid: (h.get("x-flatshare-session"), h.get("x-flatshare-first-sentence-tokens"))
            for rid, h in server.headers.items()
        }
        if on:
            assert sent == {"call/0": ("call", "3"), "call/1": ("call", "3"), "agent/0": ("agent", None)}
        else:
            assert set(sent.values()) == {(None, None)}
