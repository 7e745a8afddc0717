"""The gateway over HTTP in front of scriptable fake vLLM servers: pass-through, refusals, failures,
retries, tenants, disconnects. Each test runs with both upstream clients."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from gatewaykit import backend_rows, gateway_config, read_events, running_gateway, scrape

from flatshare.gateway.app import Gateway
from flatshare.gateway.config import PollConfig, TenantConfig
from flatshare.policy.routing import ThresholdConfig
from kit.fake_vllm import FakeState, fake_backend_app
from kit.net import ThreadServer, wait_for


@dataclass
class Rig:
    gateway: Gateway
    url: str
    states: list[FakeState]
    servers: list[ThreadServer]
    audit: Path

    def audit_lines(self, count: int) -> list[dict[str, Any]]:
        def ready() -> bool:
            return self.audit.exists() and len(self.audit.read_text().splitlines()) >= count

        wait_for(ready, 5.0, f"{count} audit lines")
        return [json.loads(line) for line in self.audit.read_text().splitlines()]

    def post(self, body: object, path: str = "/v1/completions", **kwargs: Any) -> httpx.Response:
        return httpx.post(f"{self.url}{path}", json=body, timeout=10, **kwargs)


@pytest.fixture(params=["native", "httpx"])
def client_kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def rig(stack: ExitStack, tmp_path: Path, kind: str, **changes: Any) -> Rig:
    states = [FakeState(), FakeState()]
    servers = [stack.enter_context(ThreadServer(fake_backend_app(s), log_level="critical")) for s in states]
    audit = tmp_path / "audit.jsonl"
    settings: dict[str, Any] = {
        "audit_log": str(audit),
        "upstream_client": kind,
        "prefer": "first",
        "thresholds": ThresholdConfig(0.5, 50),
        **changes,
    }
    gateway, url = stack.enter_context(running_gateway(gateway_config([s.url for s in servers], **settings)))
    return Rig(gateway, url, states, servers, audit)


@pytest.fixture
def two(tmp_path: Path, client_kind: str) -> Iterator[Rig]:
    with ExitStack() as stack:
        yield rig(stack, tmp_path, client_kind)


def test_streams_and_answers_pass_through_unchanged(two: Rig) -> None:
    body = {"model": "fake", "prompt": "hello", "stream": True}
    direct = httpx.post(f"{two.servers[0].url}/v1/completions", json=body).content
    with httpx.stream("POST", f"{two.url}/v1/completions", json=body, timeout=10) as response:
        assert response.status_code == 200
        assert response.headers["x-flatshare-backend"] == "b0"
        assert response.headers["content-type"].startswith("text/event-stream")
        assert response.read() == direct
    plain = two.post({"model": "fake", "prompt": "hello"})
    assert plain.json()["choices"][0]["text"] == " x x x x"
    assert plain.headers["x-flatshare-reason"] == "below_input_threshold"
    assert httpx.get(f"{two.url}/v1/models").json()["data"] == [{"id": "fake", "object": "model"}]
    assert httpx.get(f"{two.url}/health").status_code == 200
    assert httpx.get(f"{two.url}/v1/completions").status_code == 405
    metrics = scrape(two.url)
    assert metrics["flatshare_gateway_upstream_ttft_seconds_count{class=default}"] == 1
    assert metrics["flatshare_gateway_responses_total{code=200}"] == 2


def test_bad_requests_get_a_clear_4xx(tmp_path: Path, client_kind: str) -> None:
    with ExitStack() as stack:
        small = rig(stack, tmp_path, client_kind, max_body_bytes=2000)
        cases = [
            (b"{not json", 400, "not valid JSON", "bad_json"),
            (
                json.dumps({"model": "gpt-9", "prompt": "x"}).encode(),
                404,
                "The model `gpt-9` does not exist.",
                "unknown_model",
            ),
            (
                json.dumps({"model": "fake", "prompt": "x" * 5000}).encode(),
                413,
                "larger than the gateway's limit of 2000",
                "body_too_large",
            ),
            (json.dumps({"model": "fake"}).encode(), 400, "'prompt' is required", "bad_request"),
        ]
        for raw, status, fragment, kind in cases:
            response = httpx.post(f"{small.url}/v1/completions", content=raw, timeout=10)
            assert response.status_code == status, response.text
            error = response.json()["error"]
            assert fragment in error["message"] and error["code"] == status
            assert scrape(small.url)[f"flatshare_gateway_errors_total{{kind={kind}}}"] == 1
        assert small.states[0].bodies == small.states[1].bodies == []  # nothing reached a backend


def test_no_backend_left_is_a_503_with_retry_after(two: Rig) -> None:
    for server in two.servers:
        server.__exit__(None, None, None)
    wait_for(lambda: httpx.get(f"{two.url}/health").status_code == 503, 5.0, "both backends unhealthy")
    response = two.post({"model": "fake", "prompt": "hi"})
    assert response.status_code == 503 and response.headers["retry-after"] == "1"
    assert "no healthy backend serves model 'fake'" in response.json()["error"]["message"]
    line = two.audit_lines(1)[-1]
    assert (line["backend"], line["reason"], line["candidates"]) == (None, "no_backend", [])
    assert scrape(two.url)["flatshare_gateway_decisions_total{backend=none,reason=no_backend}"] == 1


def test_a_backend_that_refuses_sends_the_request_elsewhere(tmp_path: Path, client_kind: str) -> None:
    slow_poll = PollConfig(interval_s=30.0, timeout_s=0.5, stale_after_s=60.0)
    with ExitStack() as stack:
        r = rig(stack, tmp_path, client_kind, poll=slow_poll)
        r.servers[0].__exit__(None, None, None)  # gone; no poll will notice for 30 s
        response = r.post({"model": "fake", "prompt": "hi", "stream": True})
        assert response.status_code == 200 and response.headers["x-flatshare-backend"] == "b1"
        first, second = r.audit_lines(2)
        assert (first["backend"], first["attempt"], second["backend"], second["attempt"]) == (
            "b0",
            1,
            "b1",
            2,
        )
        assert second["candidates"] == ["b1"]
        assert not backend_rows(r.url)["b0"]["healthy"]  # a refused connection counts at once
        metrics = scrape(r.url)
        assert metrics["flatshare_gateway_retries_total{}"] == 1
        assert metrics["flatshare_gateway_errors_total{kind=upstream_connect}"] == 1
        assert r.post({"model": "fake", "prompt": "hi"}).headers["x-flatshare-backend"] == "b1"


def test_a_backend_answering_503_sends_the_request_elsewhere(two: Rig) -> None:
    two.states[0].status = 503
    response = two.post({"model": "fake", "prompt": "hi"})
    assert response.status_code == 200 and response.headers["x-flatshare-backend"] == "b1"
    assert scrape(two.url)["flatshare_gateway_errors_total{kind=upstream_status}"] == 1
    two.states[1].status = 400  # a client error is the client's: passed through, no retry
    refused = two.post({"model": "fake", "prompt": "hi"})
    assert refused.status_code == 400 and refused.json() == {"error": {"message": "fake failure"}}


def test_failure_mid_stream_reaches_the_client_as_an_error_event(two: Rig) -> None:
    two.states[0].tokens, two.states[0].break_after = 6, 3
    with httpx.stream(
        "POST", f"{two.url}/v1/completions", json={"prompt": "hi", "stream": True}, timeout=10
    ) as r:
        events = read_events(r)
    assert [json.loads(e)["choices"][0]["text"] for e in events[:3]] == [" t0", " t1", " t2"]
    error = json.loads(events[3])["error"]
    assert error["type"] == "BadGatewayError" and error["code"] == 502
    assert "backend b0 failed mid-stream" in error["message"]
    assert events[4:] == ["[DONE]"]  # and no half event before the error
    assert scrape(two.url)["flatshare_gateway_errors_total{kind=upstream_midstream}"] == 1


def test_a_backend_dying_after_its_done_leaves_the_stream_whole(two: Rig) -> None:
    """The upstream breaks after `[DONE]` reached the client (a backend killed between its last event and
    the response's end): the client's stream is already whole, so no error event and no second `[DONE]`.
    Seen in the gateway soak as "more than one [DONE]"."""
    two.states[0].tokens, two.states[0].break_after_done = 3, True
    with httpx.stream(
        "POST", f"{two.url}/v1/completions", json={"prompt": "hi", "stream": True}, timeout=10
    ) as r:
        events = read_events(r)
    assert [json.loads(e)["choices"][0]["text"] for e in events[:3]] == [" t0", " t1", " t2"]
    assert events[3:] == ["[DONE]"]
    assert scrape(two.url).get("flatshare_gateway_errors_total{kind=upstream_midstream}", 0) == 0


def test_long_request_moves_off_the_backend_whose_kv_is_full(two: Rig) -> None:
    two.states[0].kv_usage = 0.93
    wait_for(lambda: backend_rows(two.url)["b0"]["kv_usage"] == 0.93, 5.0, "a scrape of the new KV use")
    long = two.post({"model": "fake", "prompt": "word " * 200})
    short = two.post({"model": "fake", "prompt": "word"})
    assert (long.headers["x-flatshare-backend"], long.headers["x-flatshare-reason"]) == ("b1", "kv_pressure")
    assert short.headers["x-flatshare-backend"] == "b0"
    moved = two.audit_lines(2)[0]
    assert (moved["preferred"], moved["backend"], moved["input_tokens"]) == ("b0", "b1", 250)
    assert moved["backends"][0]["kv_usage"] == 0.93 and moved["thresholds"] == {
        "kv_usage": 0.5,
        "input_tokens": 50,
    }
    metrics = scrape(two.url)
    assert metrics["flatshare_gateway_decision_kv_usage_sum{reason=kv_pressure}"] == pytest.approx(0.93)
    assert metrics["flatshare_gateway_backend_kv_usage{backend=b0}"] == 0.93


def test_tenant_priority_is_forwarded_clamped(tmp_path: Path, client_kind: str) -> None:
    tenants = (
        TenantConfig("agents", ("sk-agents-01",), max_priority=10),
        TenantConfig("voice", ("sk-voice-01",), -10),
    )
    with ExitStack() as stack:
        r = rig(stack, tmp_path, client_kind, tenants=tenants)
        assert r.post({"prompt": "hi"}).status_code == 401
        agents = {"authorization": "Bearer sk-agents-01"}
        assert r.post({"prompt": "hi", "priority": -50}, headers=agents).status_code == 200
        assert r.post({"prompt": "hi", "priority": 20}, headers=agents).status_code == 200
        assert (
            r.post(
                {"prompt": "hi", "priority": -5}, headers={"authorization": "Bearer sk-voice-01"}
            ).status_code
            == 200
        )
        assert [b["priority"] for b in r.states[0].bodies] == [10, 20, -5]
        assert all("authorization" not in h for h in r.states[0].headers)  # keys stay at the gateway
        lines = r.audit_lines(3)
        assert [(a["tenant"], a["requested_priority"], a["priority"]) for a in lines] == [
            ("agents", -50, 10),
            ("agents", 20, 20),
            ("voice", -5, -5),
        ]


def test_an_arrival_hints_vllm_xargs_reach_the_backend(tmp_path: Path, client_kind: str) -> None:
    """make-room's arrival hint rides in vLLM's `vllm_xargs` (docs/make-room.md): the gateway forwards it
    whether it sends the body as received or rewrites it (a tenant's clamped priority)."""
    hint = {"prompt": "hi", "max_tokens": 1, "vllm_xargs": {"flatshare_hint": "turn"}}
    tenants = (TenantConfig("voice", ("sk-voice-01",), max_priority=0),)
    with ExitStack() as stack:
        r = rig(stack, tmp_path, client_kind, tenants=tenants)
        voice = {"authorization": "Bearer sk-voice-01"}
        assert r.post({**hint, "priority": 0}, headers=voice).status_code == 200  # as received
        assert r.post({**hint, "priority": -5}, headers=voice).status_code == 200  # clamped: rewritten
        bodies = r.states[0].bodies
        assert [b["priority"] for b in bodies] == [0, 0]
        assert [b["vllm_xargs"] for b in bodies] == [{"flatshare_hint": "turn"}] * 2


def test_a_client_that_goes_away_aborts_the_upstream_request(two: Rig) -> None:
    two.states[0].tokens, two.states[0].token_delay_s = 200, 0.02
    with httpx.stream(
        "POST", f"{two.url}/v1/completions", json={"prompt": "hi", "stream": True}, timeout=10
    ) as r:
        lines = r.iter_lines()
        assert next(line for line in lines if line.startswith("data: "))
    wait_for(lambda: two.states[0].aborted == 1, 5.0, "the backend to see the client go")
    wait_for(
        lambda: scrape(two.url)["flatshare_gateway_requests_in_flight{}"] == 0, 5.0, "in-flight back to 0"
    )
    assert two.states[0].finished == 0


def test_a_client_that_gives_up_on_a_plain_request_aborts_it_upstream(two: Rig) -> None:
    two.states[0].reply_delay_s = 5.0
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(f"{two.url}/v1/completions", json={"prompt": "hi"}, timeout=0.5)
    wait_for(lambda: two.states[0].aborted == 1, 5.0, "the backend to see the client go")
    wait_for(
        lambda: scrape(two.url)["flatshare_gateway_requests_in_flight{}"] == 0, 5.0, "in-flight back to 0"
    )
    assert scrape(two.url)["flatshare_gateway_responses_total{code=499}"] == 1
