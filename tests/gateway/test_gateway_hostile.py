"""What a hostile client or an unlucky shutdown sends the gateway (issue 16): every client-input failure is
a counted 4xx with a JSON error body and no traceback in the log; a client that leaves while sending its
body, and a stream the drain timeout cuts, log one line each; a cut stream ends with an error event and
`[DONE]`. Real gateways over fake vLLM backends on loopback, both upstream clients where it matters."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator

import httpx
import pytest
from gatewaykit import captured_logs, gateway_config, running_gateway, scrape

from flatshare.gateway.app import build_gateway
from kit.fake_vllm import FakeState, fake_backend_app
from kit.net import ThreadServer, wait_for


@pytest.fixture
def backend() -> Iterator[tuple[FakeState, str]]:
    state = FakeState(tokens=3)
    with ThreadServer(fake_backend_app(state), log_level="critical") as server:
        yield state, server.url


def _deep(levels: int) -> bytes:
    return b'{"prompt": ' + b"[" * levels + b"]" * levels + b"}"


HOSTILE_BODIES: dict[str, tuple[str, bytes]] = {
    "nested 1,000 deep": ("/v1/completions", _deep(1000)),
    "nested 100,000 deep": ("/v1/completions", _deep(100_000)),
    "lone surrogate in prompt": ("/v1/completions", b'{"prompt": "hi \\ud800 there"}'),
    "lone surrogate in model": ("/v1/completions", b'{"prompt": "hi", "model": "\\udfff"}'),
    "lone surrogate in messages": (
        "/v1/chat/completions",
        b'{"messages": [{"role": "user", "content": "\\ud83d"}]}',
    ),
    "lone surrogate in a key": ("/v1/completions", b'{"prompt": "hi", "\\ud800": 1}'),
    "5,000-digit integer": ("/v1/completions", b'{"prompt": "hi", "max_tokens": ' + b"9" * 5000 + b"}"),
    "5,000-digit priority": ("/v1/completions", b'{"prompt": "hi", "priority": -' + b"9" * 5000 + b"}"),
    "NaN": ("/v1/completions", b'{"prompt": "hi", "temperature": NaN}'),
    "1e400": ("/v1/completions", b'{"prompt": "hi", "temperature": 1e400}'),
    "not UTF-8": ("/v1/completions", b'{"prompt": "\xff\xfe"}'),
}


@pytest.mark.parametrize("client_kind", ["native", "httpx"])
def test_hostile_bodies_get_counted_4xx_and_no_traceback(
    backend: tuple[FakeState, str], client_kind: str
) -> None:
    state, url = backend
    config = gateway_config([url], upstream_client=client_kind)
    with running_gateway(config) as (_, gw), captured_logs() as logs:
        for name, (path, body) in HOSTILE_BODIES.items():
            answer = httpx.post(
                f"{gw}{path}", content=body, headers={"content-type": "application/json"}, timeout=10
            )
            assert answer.status_code == 400, (name, answer.status_code, answer.text[:200])
            error = answer.json()["error"]
            assert error["code"] == 400 and error["type"] == "BadRequestError", name
            assert error["message"], name
        good = httpx.post(f"{gw}/v1/completions", json={"prompt": "hi \U0001f600"}, timeout=10)
        assert good.status_code == 200  # a real astral character (a valid surrogate pair) still goes through
        metrics = scrape(gw)
    assert metrics["flatshare_gateway_responses_total{code=400}"] == len(HOSTILE_BODIES)
    errors = sum(v for k, v in metrics.items() if k.startswith("flatshare_gateway_errors_total{"))
    assert errors == len(HOSTILE_BODIES)
    assert not any(k.startswith("flatshare_gateway_responses_total{code=5") for k in metrics)
    assert logs.tracebacks() == []
    assert len(state.bodies) == 1  # nothing hostile went upstream


def test_surrogate_pair_escapes_are_forwarded(backend: tuple[FakeState, str]) -> None:
    state, url = backend
    with running_gateway(gateway_config([url])) as (_, gw):
        body = b'{"prompt": "smile \\ud83d\\ude00"}'
        answer = httpx.post(f"{gw}/v1/completions", content=body, timeout=10)
    assert answer.status_code == 200
    assert state.bodies[0]["prompt"] == "smile \U0001f600"


def test_a_client_leaving_mid_body_logs_no_traceback(backend: tuple[FakeState, str]) -> None:
    _, url = backend
    with running_gateway(gateway_config([url])) as (_, gw), captured_logs() as logs:
        port = int(gw.rsplit(":", 1)[1])
        for _ in range(5):
            with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
                head = (
                    "POST /v1/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
                    "content-length: 100000\r\n\r\n"
                )
                sock.sendall(head.encode() + b'{"prompt": "' + b"a" * 1000)
                time.sleep(0.05)
        wait_for(
            lambda: scrape(gw).get("flatshare_gateway_responses_total{code=499}") == 5,
            10,
            lambda: f"5 clients counted as gone ({scrape(gw)})",
        )
        assert scrape(gw)["flatshare_gateway_requests_in_flight{}"] == 0
    assert logs.tracebacks() == []
    assert len(logs.lines) <= 5  # at most one line per client


def test_drain_timeout_cut_streams_end_with_an_error_event_and_done(backend: tuple[FakeState, str]) -> None:
    state, url = backend
    state.tokens, state.token_delay_s = 200, 0.05  # 10 s a stream: longer than the drain
    server = ThreadServer(build_gateway(gateway_config([url])).app, graceful_s=1)
    with server, captured_logs() as logs, httpx.Client(timeout=20) as client:
        streams = []
        for _ in range(2):
            response = client.send(
                client.build_request(
                    "POST", f"{server.url}/v1/completions", json={"prompt": "hi", "stream": True}
                ),
                stream=True,
            )
            streams.append((response, response.iter_lines()))
        firsts = [next(line for line in lines if line.startswith("data: ")) for _, lines in streams]
        assert all(first.startswith("data: {") for first in firsts)
        server.stop()  # uvicorn stops accepting, waits graceful_s, then cancels what is left
        events = []
        for response, lines in streams:
            events.append([ln.removeprefix("data: ") for ln in lines if ln.startswith("data: ")])
            response.close()
    for got in events:
        assert got[-1] == "[DONE]", got[-3:]
        assert '"error"' in got[-2] and "shutting down" in got[-2], got[-2]
        assert len(got) < 150  # cut, not finished
    assert logs.tracebacks() == []
    cut = [line for line in logs.lines if "drain" in line]
    assert len(cut) == 2, logs.lines  # one line per cut stream


HOSTILE_HEADERS: dict[str, list[tuple[bytes, bytes]]] = {
    "superscript first-sentence count": [(b"x-flatshare-first-sentence-tokens", "\u00b2".encode("latin-1"))],
    "5,000-digit first-sentence count": [(b"x-flatshare-first-sentence-tokens", b"9" * 5000)],
    "latin-1 class": [(b"x-flatshare-class", "\u00e9t\u00e9".encode("latin-1"))],
    "latin-1 request id": [(b"x-request-id", "\u00b2\u00b2".encode("latin-1"))],
    "latin-1 key": [
        (b"authorization", "Bearer \u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9".encode("latin-1"))
    ],
}


def test_hostile_headers_get_no_5xx(backend: tuple[FakeState, str]) -> None:
    """Header values are latin-1 text to the gateway: digits it cannot convert, long numbers and
    non-ASCII names are ignored or refused with a 4xx, never a 500."""
    _, url = backend
    with running_gateway(gateway_config([url])) as (_, gw), captured_logs() as logs:
        port = int(gw.rsplit(":", 1)[1])
        codes = {}
        for name, extra in HOSTILE_HEADERS.items():
            body = b'{"prompt": "hi"}'
            head = b"POST /v1/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
            head += b"".join(k + b": " + v + b"\r\n" for k, v in extra)
            head += b"content-length: %d\r\nconnection: close\r\n\r\n" % len(body)
            with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
                sock.sendall(head + body)
                answer = b""
                while chunk := sock.recv(65536):
                    answer += chunk
            codes[name] = int(answer.split(b" ", 2)[1])
        metrics = scrape(gw)
    assert all(code < 500 for code in codes.values()), codes
    assert codes["latin-1 class"] == 400
    assert not any(k.startswith("flatshare_gateway_responses_total{code=5") for k in metrics)
    assert logs.tracebacks() == []
