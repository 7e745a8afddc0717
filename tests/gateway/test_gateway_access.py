"""The security model (docs/gateway.md, "Security model"; `access.py`): with tenants configured, an
anonymous client reads `/health` only, a tenant also `/v1/models`, the admin token everything;
`expose_metrics` and `expose_status` open `/metrics` and the status routes to anyone. Open gateways
(no tenants) answer every read to anyone. A gateway whose backends require an API key polls, discovers
models, tokenizes and proxies with it (issue 16)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from gatewaykit import gateway_config, running_gateway
from starlette.types import ASGIApp, Receive, Scope, Send

from flatshare.gateway.access import Access, Reader
from flatshare.gateway.backends import BackendPool
from flatshare.gateway.config import TenantConfig, TokenConfig
from flatshare.gateway.configfile import load_config
from flatshare.gateway.telemetry import GatewayMetrics
from flatshare.gateway.tenants import Tenants
from kit.fake_vllm import FakeState, fake_backend_app
from kit.net import ThreadServer, wait_for

ADMIN = "admin-token-0123456789"
TENANT_KEY = "sk-tenant-key-01"
TENANTS = (TenantConfig("app", (TENANT_KEY,)),)
READS = ["/v1/models", "/metrics", "/gateway/backends", "/gateway/routing"]


@pytest.fixture
def backend() -> Iterator[tuple[FakeState, str]]:
    state = FakeState(tokens=3)
    with ThreadServer(fake_backend_app(state), log_level="critical") as server:
        yield state, server.url


def statuses(url: str, token: str | None) -> dict[str, int]:
    headers = {"authorization": f"Bearer {token}"} if token else {}
    codes = {path: httpx.get(f"{url}{path}", headers=headers, timeout=5).status_code for path in READS}
    codes["/health"] = httpx.get(f"{url}/health", headers=headers, timeout=5).status_code
    return codes


def test_with_tenants_anonymous_reads_health_only(backend: tuple[FakeState, str]) -> None:
    _, url = backend
    config = gateway_config([url], tenants=TENANTS, admin_token=ADMIN)
    with running_gateway(config) as (_, gw):
        anonymous = statuses(gw, None)
        stranger = statuses(gw, "sk-not-a-known-key")
        tenant = statuses(gw, TENANT_KEY)
        admin = statuses(gw, ADMIN)
        refusal = httpx.get(f"{gw}/gateway/backends", timeout=5)
    assert anonymous == stranger == {p: 401 for p in READS} | {"/health": 200}
    assert tenant == {p: 401 for p in READS} | {"/v1/models": 200, "/health": 200}
    assert admin == {p: 200 for p in [*READS, "/health"]}
    error = refusal.json()["error"]
    assert error["code"] == 401 and "admin token" in error["message"] and url not in refusal.text


def test_without_an_admin_token_the_status_routes_stay_closed(backend: tuple[FakeState, str]) -> None:
    _, url = backend
    with running_gateway(gateway_config([url], tenants=TENANTS)) as (_, gw):
        assert statuses(gw, TENANT_KEY) == {p: 401 for p in READS} | {"/v1/models": 200, "/health": 200}


def test_expose_settings_open_metrics_and_status(backend: tuple[FakeState, str]) -> None:
    _, url = backend
    with running_gateway(gateway_config([url], tenants=TENANTS, expose_metrics=True)) as (_, gw):
        metrics_only = statuses(gw, None)
    with running_gateway(gateway_config([url], tenants=TENANTS, expose_status=True)) as (_, gw):
        status = statuses(gw, None)
    assert metrics_only == {p: 401 for p in READS} | {"/metrics": 200, "/health": 200}
    assert status == {p: 200 for p in READS} | {"/v1/models": 401, "/health": 200}


def test_open_gateways_answer_every_read(backend: tuple[FakeState, str]) -> None:
    _, url = backend
    with running_gateway(gateway_config([url])) as (_, gw):
        assert statuses(gw, None) == {p: 200 for p in [*READS, "/health"]}


# -- a backend that requires an API key ----------------------------------------------------------------
BACKEND_KEY = "sk-backend-secret-42"


class RequireKey:
    """In front of a backend app: every request without `Authorization: Bearer <key>` gets 401 (a
    stricter rule than vLLM's `--api-key`, which guards the `/v1` paths); records what each carried."""

    def __init__(self, app: ASGIApp, key: str) -> None:
        self.app = app
        self.key = key
        self.seen: list[tuple[str, str | None]] = []

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope["headers"])
        given = headers.get(b"authorization")
        self.seen.append((scope["path"], given.decode() if given is not None else None))
        if given != f"Bearer {self.key}".encode():
            await send({"type": "http.response.start", "status": 401, "headers": []})
            await send({"type": "http.response.body", "body": b'{"error": "Unauthorized"}'})
            return
        await self.app(scope, receive, send)


@pytest.mark.parametrize("client_kind", ["native", "httpx"])
def test_every_backend_request_carries_backend_api_key(client_kind: str) -> None:
    state = FakeState(tokens=3)
    guarded = RequireKey(fake_backend_app(state), BACKEND_KEY)
    tokens = TokenConfig(source="backend", exact_min_estimate=0)
    changes: dict[str, Any] = {
        "backend_api_key": BACKEND_KEY,
        "tokens": tokens,
        "upstream_client": client_kind,
    }
    with ThreadServer(guarded, log_level="critical") as server:
        config = gateway_config([server.url], tenants=TENANTS, **changes)
        with running_gateway(config) as (gateway, gw):
            wait_for(lambda: gateway.pool.states[0].healthy, 10, "the key-protected backend to be healthy")
            client = {"authorization": f"Bearer {TENANT_KEY}"}
            models = httpx.get(f"{gw}/v1/models", headers=client, timeout=5).json()["data"]
            whole = httpx.post(f"{gw}/v1/completions", json={"prompt": "hi"}, headers=client, timeout=10)
            body = {"prompt": "hi", "stream": True}
            with httpx.stream(
                "POST", f"{gw}/v1/completions", json=body, headers=client, timeout=10
            ) as stream:
                events = [line for line in stream.iter_lines() if line.startswith("data: ")]
            backends = httpx.get(f"{gw}/gateway/backends", timeout=5)
    assert models and whole.status_code == 200 and events[-1] == "data: [DONE]"
    paths = {path for path, _ in guarded.seen}
    assert {"/metrics", "/health", "/v1/models", "/tokenize", "/v1/completions"} <= paths
    assert {given for _, given in guarded.seen} == {f"Bearer {BACKEND_KEY}"}  # every one, never the client's
    assert backends.status_code == 401 and BACKEND_KEY not in backends.text


def test_the_kubernetes_config_lets_prometheus_scrape_without_a_token(tmp_path: Path) -> None:
    """The manifests' gateway (tenants appended from the Secret) keeps its annotation scrape and its
    `/metrics` liveness probe working without a secret, and its status routes admin-only."""
    deploy = Path(__file__).resolve().parents[2] / "deploy" / "kubernetes" / "gateway"
    merged = tmp_path / "gateway.toml"  # as the pod's init container writes it
    merged.write_text((deploy / "gateway.toml").read_text() + "\n" + (deploy / "tenants.toml").read_text())
    config = load_config(merged)
    assert config.tenants
    access = Access(
        config, Tenants(config), GatewayMetrics(BackendPool((), config.poll), time.monotonic, None)
    )
    assert access.allows(Reader.METRICS, None)
    assert not access.allows(Reader.STATUS, None) and not access.allows(Reader.TENANT, None)
