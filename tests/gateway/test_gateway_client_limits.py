"""What one client may cost the gateway (issue 32, items 4, 5 and 11): the request head's size and time,
the body's time, connections per address, the size of a backend's non-streaming answer; duplicate JSON keys
and the redirect's `Location`. Real gateways over a fake vLLM backend on loopback, raw sockets where a
client misbehaves below HTTP; small limits keep every test within a few seconds."""

from __future__ import annotations

import contextlib
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from gatewaykit import gateway_config, running_gateway, scrape

from flatshare.errors import InputError
from flatshare.gateway.configfile import load_config
from flatshare.gateway.connections import ClientLimits
from kit.fake_vllm import FakeState, fake_backend_app
from kit.net import ThreadServer


@pytest.fixture
def backend() -> Iterator[tuple[FakeState, str]]:
    state = FakeState(tokens=3)
    with ThreadServer(fake_backend_app(state), log_level="critical") as server:
        yield state, server.url


def _connect(url: str) -> socket.socket:
    host, port = url.removeprefix("http://").rsplit(":", 1)
    return socket.create_connection((host, int(port)), timeout=10)


def _answer(sock: socket.socket, within_s: float) -> tuple[bytes, float]:
    """Everything the server sends until it closes the connection, and how long that took."""
    started = time.monotonic()
    sock.settimeout(within_s)
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    return data, time.monotonic() - started


HEAD = b"POST /v1/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"


def test_a_huge_request_head_gets_431(backend: tuple[FakeState, str]) -> None:
    """Before: a 32 MB header was accepted (200)."""
    _, url = backend
    config = gateway_config([url], clients=ClientLimits(max_header_bytes=16 * 1024))
    with running_gateway(config) as (_, gw):
        for size in (17_000, 4 * 1024 * 1024):  # one read, many reads
            with _connect(gw) as sock:
                with contextlib.suppress(OSError):  # the gateway may close before taking all of it
                    sock.sendall(b"GET /health HTTP/1.1\r\nhost: x\r\nx-big: " + b"a" * size + b"\r\n\r\n")
                data, _ = _answer(sock, 10)
            assert data.startswith(b"HTTP/1.1 431 "), (size, data[:100])
        assert httpx.get(f"{gw}/health", headers={"x-ok": "a" * 8000}, timeout=5).status_code == 200


def test_a_body_sent_after_its_answer_is_dropped_and_the_connection_serves_on(
    backend: tuple[FakeState, str],
) -> None:
    """A route that answers without reading the body (GET /health with one): the late body is dropped,
    not read as the next head, and the next request on the connection is served."""
    _, url = backend
    config = gateway_config([url], clients=ClientLimits(max_header_bytes=2048))
    with running_gateway(config) as (_, gw), _connect(gw) as sock:
        sock.sendall(b"GET /health HTTP/1.1\r\nhost: x\r\ncontent-length: 5000\r\n\r\n")
        first = sock.recv(65536)
        assert first.startswith(b"HTTP/1.1 200 "), first[:100]
        sock.sendall(b"a" * 5000)  # more than a head may be: still no 431
        sock.sendall(b"GET /health HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
        second, _ = _answer(sock, 5)
        assert second.startswith(b"HTTP/1.1 200 "), second[:100]


def test_a_silent_connection_is_closed(backend: tuple[FakeState, str]) -> None:
    """Before: a connection that sent nothing stayed open past 75 s."""
    _, url = backend
    config = gateway_config([url], clients=ClientLimits(header_timeout_s=0.5))
    with running_gateway(config) as (_, gw), _connect(gw) as sock:
        data, took = _answer(sock, 10)
        assert data == b"" and took < 5


def test_a_header_drip_gets_408(backend: tuple[FakeState, str]) -> None:
    """Before: a head sent a byte at a time, each within the keep-alive time, stayed open for good."""
    _, url = backend
    config = gateway_config([url], clients=ClientLimits(header_timeout_s=1.0))
    with running_gateway(config) as (_, gw), _connect(gw) as sock:
        started = time.monotonic()
        sock.settimeout(0.2)
        closed = b""
        for byte in HEAD:
            try:
                sock.sendall(bytes([byte]))
                closed = sock.recv(65536)
            except TimeoutError:
                continue
            except OSError:
                break
            if closed:
                break
        assert closed.startswith(b"HTTP/1.1 408 "), closed[:100]
        assert time.monotonic() - started < 5


def test_a_body_drip_gets_408(backend: tuple[FakeState, str]) -> None:
    """Before: a body of a byte every 5 s held its connection past 75 s."""
    state, url = backend
    config = gateway_config([url], clients=ClientLimits(body_timeout_s=1.0))
    with running_gateway(config) as (_, gw), _connect(gw) as sock:
        sock.sendall(HEAD + b"content-length: 100\r\n\r\n{")
        started = time.monotonic()
        sock.settimeout(0.3)
        data = b""
        while not data and time.monotonic() - started < 5:
            try:
                sock.sendall(b" ")
                data = sock.recv(65536)
            except TimeoutError:
                continue
        assert data.startswith(b"HTTP/1.1 408 "), data[:100]
        assert b"did not arrive within 1 s" in data
        assert scrape(gw)["flatshare_gateway_errors_total{kind=body_timeout}"] == 1
    assert state.bodies == []


def test_connections_per_address_are_capped(backend: tuple[FakeState, str]) -> None:
    """Before: 260 idle anonymous connections (at ulimit -n 256) reset every legitimate client."""
    _, url = backend
    config = gateway_config([url], clients=ClientLimits(max_connections_per_address=4))
    with running_gateway(config) as (_, gw):
        idle = [_connect(gw) for _ in range(4)]
        try:
            with _connect(gw) as extra:
                data, _ = _answer(extra, 5)
            assert data.startswith(b"HTTP/1.1 503 "), data[:100]
        finally:
            for sock in idle:
                sock.close()
        time.sleep(0.2)  # the server sees them close
        assert httpx.get(f"{gw}/health", timeout=5).status_code == 200


def test_a_huge_non_streaming_answer_is_a_502(backend: tuple[FakeState, str]) -> None:
    """Before: a backend's 200 MB non-streaming answer was read whole (+270 MB)."""
    state, url = backend
    state.tokens = 20_000  # about 40 KB of text
    config = gateway_config([url], clients=ClientLimits(max_response_bytes=10_000))
    with running_gateway(config) as (_, gw):
        answer = httpx.post(f"{gw}/v1/completions", json={"prompt": "hi"}, timeout=10)
        assert answer.status_code == 502 and "limit of 10000 bytes" in answer.json()["error"]["message"]
        state.tokens = 3
        assert httpx.post(f"{gw}/v1/completions", json={"prompt": "hi"}, timeout=10).status_code == 200


def test_duplicate_keys_are_refused(backend: tuple[FakeState, str]) -> None:
    """Before: `"priority":-100,"priority":50` went upstream byte for byte (a backend keeping the first key
    runs at -100, past the tenant's clamp)."""
    state, url = backend
    with running_gateway(gateway_config([url])) as (_, gw):
        for body in (
            b'{"prompt":"hi","priority":-100,"priority":50}',
            b'{"prompt":"hi","stream":false,"stream":true}',
            b'{"messages":[{"role":"user","role":"system","content":"x"}]}',
        ):
            path = "/v1/chat/completions" if b"messages" in body else "/v1/completions"
            answer = httpx.post(f"{gw}{path}", content=body, timeout=10)
            assert answer.status_code == 400, body
            assert "appears more than once" in answer.json()["error"]["message"]
    assert state.bodies == []


def test_the_redirect_does_not_reflect_the_host_header(backend: tuple[FakeState, str]) -> None:
    """Before: `GET /v1/models/` with `Host: evil.example` answered 307 `Location: http://evil.example/...`."""
    _, url = backend
    with running_gateway(gateway_config([url])) as (_, gw):
        answer = httpx.get(f"{gw}/v1/models/?x=1", headers={"host": "evil.example"}, timeout=5)
        assert answer.status_code == 307 and answer.headers["location"] == "/v1/models?x=1"
        assert httpx.get(f"{gw}/v1/models/", follow_redirects=True, timeout=5).status_code == 200
        assert httpx.get(f"{gw}/nothing/", timeout=5).status_code == 404


def test_the_clients_table_is_read_and_checked(tmp_path: Path) -> None:
    good = tmp_path / "gw.toml"
    good.write_text(
        '[[backends]]\nurl = "http://127.0.0.1:9"\n\n[clients]\nheader_timeout_s = 2.5\nmax_sessions = 10\n'
    )
    clients = load_config(good).clients
    assert (clients.header_timeout_s, clients.max_sessions, clients.max_header_bytes) == (2.5, 10, 65536)
    for bad, named in (
        ("header_timeout_s = 0", "clients.header_timeout_s must be > 0"),
        ("max_header_bytes = 100", "clients.max_header_bytes must be >= 1024"),
        ("max_connections_per_address = -1", "clients.max_connections_per_address must be >= 0"),
        ("slowloris = 1", "unknown key slowloris in clients"),
    ):
        good.write_text(f'[[backends]]\nurl = "http://127.0.0.1:9"\n\n[clients]\n{bad}\n')
        with pytest.raises(InputError, match=named):
            load_config(good)
