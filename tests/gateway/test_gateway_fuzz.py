"""The gateway fuzzed over HTTP (issue 16): schemathesis drives every route of the shipped OpenAPI description
(`flatshare/gateway/openapi.yaml`), and hypothesis strategies go beyond the schema (arbitrary bytes, odd
JSON, odd headers, lying Content-Length). One running gateway over two serve-sim backends, with tenants,
an admin token, a backend API key and an audit log, so there are secrets to leak.

Invariants, after every case: no 5xx (the backends stay healthy, so a 503 could only come from the input);
no traceback in the log; `flatshare_gateway_responses_total` grows by exactly one for each request to a
proxied route (and by none for the others, which it does not count); no secret in the answer's body or
headers. At the end: no secret in any log line or in the audit log, `/health` answers 200 and a normal
streamed completion ends with `[DONE]`.

Bounded for `make test` (fixed examples, `kit.fuzz`); `FLATSHARE_FUZZ=long` (`make fuzz`) runs 20x more."""

from __future__ import annotations

import contextlib
import itertools
import json
import socket
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import httpx
import pytest
import schemathesis
import yaml
from gatewaykit import Records, captured_logs, gateway_config, read_events, running_gateway
from hypothesis import given
from hypothesis import strategies as st
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)
from starlette.routing import Route

from flatshare.gateway.app import Gateway, build_gateway
from flatshare.gateway.config import GatewayConfig, TenantConfig
from flatshare.gateway.connections import ClientLimits
from kit.fuzz import fuzz_settings, odd_json
from kit.net import ThreadServer, wait_for

pytestmark = [pytest.mark.fuzz, pytest.mark.vllm]

OPENAPI = resources.files("flatshare.gateway") / "openapi.yaml"
SCHEMA = schemathesis.openapi.from_path(str(OPENAPI))

TENANT_KEY = "sk-fuzz-voice-5f1c0e2a9b7d4c63"
LOW_TENANT_KEY = "sk-fuzz-agent-8e3b6a1f0c2d4e95"
ADMIN_TOKEN = "admin-fuzz-9d2e7c4b1a6f3e80"
BACKEND_KEY = "backend-fuzz-3c8a1e5f7b2d9046"
SECRETS = (TENANT_KEY, LOW_TENANT_KEY, ADMIN_TOKEN, BACKEND_KEY)
PROXIED = frozenset({"/v1/completions", "/v1/chat/completions"})
# (method, path) of every route: the schema's operations, which a test below checks against the app.
ROUTES = (
    ("POST", "/v1/completions"),
    ("POST", "/v1/chat/completions"),
    ("GET", "/v1/models"),
    ("GET", "/health"),
    ("GET", "/metrics"),
    ("GET", "/gateway/backends"),
    ("GET", "/gateway/routing"),
    ("PUT", "/gateway/routing"),
    ("POST", "/gateway/events"),
)
MAX_HEAD = 16 * 1024  # the gateway's request head limit here (clients.max_header_bytes)
AUTHS = (f"Bearer {TENANT_KEY}", f"Bearer {LOW_TENANT_KEY}", f"Bearer {ADMIN_TOKEN}", None, "Bearer sk-wrong")


@contextmanager
def fast_sim_backends(count: int) -> Iterator[list[str]]:
    """serve-sim backends whose virtual clock runs 50x the wall clock (a fuzzed max_tokens of a few
    thousand must not take minutes), with a short context so vLLM's length checks see use."""
    from flatshare.serve.server import build_sim_app
    from flatshare.sim.config import EngineConfig
    from flatshare.sim.profile import load_profile

    with ExitStack() as stack:
        urls = []
        for _ in range(count):
            app = build_sim_app(EngineConfig(max_model_len=4096), load_profile(), seed=0, speed=50)
            urls.append(stack.enter_context(ThreadServer(app, log_level="critical")).url)
        yield urls


def fuzz_config(urls: list[str], audit_log: Path) -> GatewayConfig:
    tenants = (
        TenantConfig(name="voice", api_keys=(TENANT_KEY,), max_priority=-10),
        TenantConfig(name="agent", api_keys=(LOW_TENANT_KEY,), max_priority=10),
    )
    return gateway_config(
        urls,
        tenants=tenants,
        admin_token=ADMIN_TOKEN,
        backend_api_key=BACKEND_KEY,
        audit_log=str(audit_log),
        max_body_bytes=64 * 1024,
        clients=ClientLimits(max_header_bytes=MAX_HEAD),
    )


@dataclass
class Fuzzed:
    """The gateway under fuzzing and what the invariants need."""

    gateway: Gateway
    url: str
    logs: Records
    audit_log: Path
    client: httpx.Client
    sent_proxied: int = 0
    cases: int = 0
    statuses: dict[int, int] = field(default_factory=dict)
    _auths: Iterator[str | None] = field(default_factory=lambda: itertools.cycle(AUTHS))

    def next_auth(self) -> dict[str, str]:
        auth = next(self._auths)
        return {"Authorization": auth} if auth is not None else {}

    def responses_counted(self) -> float:
        return sum(
            sample.value
            for metric in self.gateway.metrics.responses.collect()
            for sample in metric.samples
            if sample.name.endswith("_total")
        )

    def check(self, method: str, path: str, status: int | None, headers: Any, body: bytes) -> None:
        """The per-case invariants (module docstring); `status` None: no answer came (the client left)."""
        self.cases += 1
        if status is not None:
            self.statuses[status] = self.statuses.get(status, 0) + 1
            assert status < 500, (method, path, status, body[:300])
            shown = body + b"".join(f"{k}: {v}".encode("latin-1", "replace") for k, v in headers.items())
            for secret in SECRETS:
                assert secret.encode() not in shown, (method, path, "leaked a secret")
        if method == "POST" and path in PROXIED:
            self.sent_proxied += 1
        wait_for(
            lambda: self.responses_counted() == self.sent_proxied,
            10,
            lambda: (
                f"responses_total {self.responses_counted()} != {self.sent_proxied} proxied requests sent"
            ),
            interval_s=0.005,
        )
        assert self.logs.tracebacks() == [], self.logs.lines[-30:]


@pytest.fixture(scope="module")
def fuzzed(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Iterator[Fuzzed]:
    audit_log = tmp_path_factory.mktemp("fuzz") / "audit.jsonl"
    with ExitStack() as stack:
        urls = stack.enter_context(fast_sim_backends(2))
        logs = stack.enter_context(captured_logs())
        gateway, url = stack.enter_context(running_gateway(fuzz_config(urls, audit_log)))
        client = stack.enter_context(httpx.Client(base_url=url, timeout=30))
        wait_for(lambda: all(s.healthy for s in gateway.pool.states), 10, "both backends healthy")
        state = Fuzzed(gateway, url, logs, audit_log, client)
        yield state
        _final_checks(state)
    statuses = dict(sorted(state.statuses.items()))
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    capture = request.config.pluginmanager.get_plugin("capturemanager")
    if reporter is not None and capture is not None:  # the number of cases, for the record (make fuzz)
        with capture.global_and_fixture_disabled():
            reporter.write_line(f"\ngateway fuzz: {state.cases} HTTP cases, statuses {statuses}")


def _final_checks(state: Fuzzed) -> None:
    """The gateway is healthy after everything, and no secret reached a log line or the audit log."""
    assert state.client.get("/health").status_code == 200
    auth = {"Authorization": f"Bearer {TENANT_KEY}"}
    body = {"prompt": "still there?", "max_tokens": 4, "stream": True}
    with state.client.stream("POST", "/v1/completions", json=body, headers=auth) as response:
        assert response.status_code == 200
        assert read_events(response)[-1] == "[DONE]"
    state.gateway.audit.flush()
    audit = state.audit_log.read_text()
    assert all(isinstance(json.loads(line), dict) for line in audit.splitlines())  # whole JSON lines
    logged = "\n".join(state.logs.lines) + audit
    for secret in SECRETS:
        assert secret not in logged
    assert state.logs.tracebacks() == []


# -- the schema and the app agree ----------------------------------------------------------------------------
def test_every_route_is_described_and_every_description_is_a_route() -> None:
    spec = yaml.safe_load(OPENAPI.read_text())
    described = {(m.upper(), p) for p, ops in spec["paths"].items() for m in ops}
    app = build_gateway(gateway_config(["http://127.0.0.1:9"])).app
    served = {
        (method, route.path)
        for route in app.fallback.routes
        if isinstance(route, Route)
        for method in route.methods or ()
        if method != "HEAD"
    }
    assert served | {("POST", p) for p in app.paths} == described
    assert described == set(ROUTES)


# -- schemathesis --------------------------------------------------------------------------------------------
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]


@SCHEMA.parametrize()
@fuzz_settings(30)
def test_schema_driven(case: Any, fuzzed: Fuzzed) -> None:
    """Every operation of the OpenAPI description, with valid and invalid data; the caller rotates
    through a tenant, a low-priority tenant, the admin, nobody and a wrong key."""
    response = case.call(base_url=fuzzed.url, headers=fuzzed.next_auth(), timeout=30)
    fuzzed.check(case.method, case.path, response.status_code, response.headers, response.content)
    case.validate_response(response, checks=CHECKS)


# -- beyond the schema ---------------------------------------------------------------------------------------
def _odd_body() -> st.SearchStrategy[bytes]:
    """A request-shaped object with odd values in the fields the gateway reads, a whole odd document,
    or arbitrary bytes."""
    field_names = st.sampled_from(["model", "prompt", "messages", "priority", "stream", "max_tokens"])
    shaped = st.lists(st.tuples(field_names, odd_json()), min_size=1, max_size=4).map(
        lambda kv: "{" + ",".join(f'"{k}":{v}' for k, v in kv) + "}"
    )
    return st.one_of(shaped.map(str.encode), odd_json().map(str.encode), st.binary(max_size=2048))


_HEADER_TEXT = st.text(
    st.characters(min_codepoint=0x20, max_codepoint=0xFF, exclude_characters="\x7f"), max_size=60
).map(str.strip)


def _authorization() -> st.SearchStrategy[str]:
    secret = st.sampled_from(SECRETS)
    mutated = st.tuples(
        st.sampled_from(["Bearer ", "bearer ", "BEARER  ", "Bearer\t", "Basic ", "", "Bearer"]),
        secret,
        st.sampled_from(["", " ", "x", "\t", "=="]),
        st.integers(0, 8),
    ).map(lambda t: (t[0] + t[1][: len(t[1]) - t[3]] + t[2]).strip())
    return st.one_of(mutated, _HEADER_TEXT, _HEADER_TEXT.map(lambda s: ("Bearer " + s).strip()))


def _header_bytes(text: str) -> bytes:
    """A header value as sent: latin-1 bytes where it fits (one byte a character), else UTF-8."""
    try:
        return text.encode("latin-1")
    except UnicodeEncodeError:
        return text.encode("utf-8")


def _headers() -> st.SearchStrategy[dict[bytes, bytes]]:
    values = {
        "authorization": _authorization(),
        "x-flatshare-class": st.one_of(
            st.sampled_from(["voice", "chat", "agent", "VOICE", ""]), _HEADER_TEXT
        ),
        "x-flatshare-first-sentence-tokens": st.one_of(
            st.integers(-5, 10**30).map(str),
            st.sampled_from(["²", "١٢", "1e3", "+7", "07", "0x10"]),
            _HEADER_TEXT,
        ),
        "x-request-id": _HEADER_TEXT,
        "x-flatshare-session": _HEADER_TEXT,
        "content-type": st.sampled_from(
            [
                "application/json",
                "text/plain",
                "application/json; charset=latin-1",
                "",
                "*/*",
                "multipart/form-data",
            ]
        ),
        "accept": st.sampled_from(["text/event-stream", "application/json", "*/*", "ü"]),
    }
    return st.fixed_dictionaries({}, optional={k.encode(): v.map(_header_bytes) for k, v in values.items()})


@fuzz_settings(150)
@given(route=st.sampled_from(ROUTES), body=_odd_body(), headers=_headers())
def test_odd_bodies_and_headers_on_every_route(
    fuzzed: Fuzzed, route: tuple[str, str], body: bytes, headers: dict[bytes, bytes]
) -> None:
    method, path = route
    response = fuzzed.client.request(method, path, content=body, headers=headers)
    fuzzed.check(method, path, response.status_code, response.headers, response.content)
    if path in PROXIED and response.status_code >= 400:
        error = response.json()["error"]  # the gateway's own refusals and vLLM's are JSON errors
        assert error["code"] == response.status_code and error["message"]


def _content_lengths() -> st.SearchStrategy[tuple[str, int]]:
    """(Content-Length as sent, bytes actually sent): honest, short, long, odd spellings."""
    return st.one_of(
        st.integers(0, 300).map(lambda n: (str(n), n)),
        st.tuples(st.integers(0, 300), st.integers(1, 50)).map(lambda t: (str(t[0] + t[1]), t[0])),
        st.sampled_from(["+5", " 5", "05", "-1", "5 5", "0x5", "٥", "9" * 40, ""]).map(lambda s: (s, 5)),
    )


@fuzz_settings(40)
@given(
    route=st.sampled_from(ROUTES), length=_content_lengths(), payload=st.binary(min_size=300, max_size=300)
)
def test_lying_content_length(
    fuzzed: Fuzzed, route: tuple[str, str], length: tuple[str, int], payload: bytes
) -> None:
    """A Content-Length that is not the body's (the client then stops sending) or not a number: a 4xx,
    or the client counted as gone (499), never a 5xx, a hang or a traceback."""
    method, path = route
    declared, sent = length
    before = fuzzed.responses_counted()
    head = (
        f"{method} {path} HTTP/1.1\r\nhost: fuzz\r\ncontent-type: application/json\r\n"
        f"authorization: Bearer {TENANT_KEY}\r\ncontent-length: {declared}\r\nconnection: close\r\n\r\n"
    ).encode()
    port = int(fuzzed.url.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(head + payload[:sent])
        sock.shutdown(socket.SHUT_WR)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    status = int(answer.split(b" ", 2)[1]) if answer.startswith(b"HTTP/1.1 ") else None
    head_part = answer.partition(b"\r\n\r\n")[0]
    fuzzed.cases += 1
    if status is not None:
        fuzzed.statuses[status] = fuzzed.statuses.get(status, 0) + 1
        assert status < 500, (declared, sent, answer[:300])
        for secret in SECRETS:
            assert secret.encode() not in answer
    # uvicorn refuses a malformed Content-Length before the app sees the request (not counted); every
    # request that reached a proxied route is counted, answered or not (499)
    if method == "POST" and path in PROXIED:
        reached = b"application/json" in head_part or b"text/event-stream" in head_part or status is None
        if reached:
            wait_for(lambda: fuzzed.responses_counted() == before + 1, 10, "the request counted")
    wait_for(lambda: fuzzed.responses_counted() - before in (0, 1), 10, "at most one count")
    fuzzed.sent_proxied += int(fuzzed.responses_counted() - before)
    assert fuzzed.logs.tracebacks() == [], fuzzed.logs.lines[-30:]


# -- duplicate keys and request heads around the limit (issue 32) -------------------------------------------
JSON_ROUTES = (*sorted(PROXIED), "/gateway/routing")  # /gateway/events is off here (no baseline): 404


@st.composite
def _duplicated(draw: st.DrawFn) -> bytes:
    """A request-shaped object in which one object (the top level or a message) names a key twice."""
    names = st.sampled_from(
        ["model", "prompt", "priority", "stream", "max_tokens", "kind", "session", "role"]
    )
    pairs = draw(st.lists(st.tuples(names, odd_json()), min_size=1, max_size=4))
    twice = draw(names)
    pairs += [(twice, draw(odd_json())), (twice, draw(odd_json()))]
    pairs = draw(st.permutations(pairs))
    inner = "{" + ",".join(f'"{k}":{v}' for k, v in pairs) + "}"
    if draw(st.booleans()):
        return ('{"prompt":"x","messages":[' + inner + "]}").encode()
    return inner.encode()


@fuzz_settings(60)
@given(path=st.sampled_from(JSON_ROUTES), body=_duplicated())
def test_duplicate_keys_are_refused(fuzzed: Fuzzed, path: str, body: bytes) -> None:
    """Any object naming a key twice, anywhere in a JSON body the gateway reads, is a 400 (a body that
    is not valid JSON for another reason may be refused for that first); it never reaches a backend."""
    method = "PUT" if path == "/gateway/routing" else "POST"
    auth = f"Bearer {TENANT_KEY}" if path in PROXIED else f"Bearer {ADMIN_TOKEN}"
    response = fuzzed.client.request(method, path, content=body, headers={"authorization": auth})
    fuzzed.check(method, path, response.status_code, response.headers, response.content)
    assert response.status_code == 400, (path, body[:200], response.text[:200])


@fuzz_settings(40)
@given(
    total=st.one_of(st.integers(0, 4 * MAX_HEAD), st.integers(MAX_HEAD - 200, MAX_HEAD + 200)),
    count=st.integers(1, 12),
    pieces=st.integers(1, 4),
)
def test_request_heads_around_the_limit(fuzzed: Fuzzed, total: int, count: int, pieces: int) -> None:
    """A head over `clients.max_header_bytes` gets 431 whether it comes in one write or several; one
    within it is served (raw sockets, anonymous `GET /health`)."""
    head = b"GET /health HTTP/1.1\r\nhost: fuzz\r\nconnection: close\r\n"
    head += b"".join(b"x-pad-%d: %s\r\n" % (i, b"a" * (total // count)) for i in range(count)) + b"\r\n"
    port = int(fuzzed.url.rsplit(":", 1)[1])
    answer = b""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        step = -(-len(head) // pieces)
        with contextlib.suppress(ConnectionError):  # refused before all of it was sent
            for start in range(0, len(head), step):
                sock.sendall(head[start : start + step])
        with contextlib.suppress(ConnectionError):  # closed with the rest unread: a reset after the answer
            while chunk := sock.recv(65536):
                answer += chunk
    status = int(answer.split(b" ", 2)[1]) if answer.startswith(b"HTTP/1.1 ") else None
    fuzzed.check("GET", "/health", status, {}, answer)
    assert status == (431 if len(head) > MAX_HEAD else 200), (len(head), answer[:200])
