"""Tenant isolation (issue 32, item 3): nothing one tenant names reaches another tenant's state. Sessions
(`X-Flatshare-Session`) are scoped by tenant, so the agents tenant naming the voice tenant's session moves
nothing of the voice tenant's: a `caller_speaking` event for the voice tenant's session opens the
Leaseholder lease on the backend of the voice tenant's own last request, and the agents that see it are the
ones on that backend. Real gateway over two fake vLLM backends on loopback, round-robin routing."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import httpx
import pytest
from gatewaykit import gateway_config, running_gateway, scrape

from flatshare.gateway.config import TenantConfig
from flatshare.gateway.connections import ClientLimits
from kit.fake_vllm import FakeState, fake_backend_app
from kit.net import ThreadServer, wait_for

ADMIN = "admin-token-0123456789"
VOICE_KEY, AGENTS_KEY = "voice-key-0001", "agents-key-0001"
TENANTS = (
    TenantConfig("voice", (VOICE_KEY,), max_priority=-10),
    TenantConfig("agents", (AGENTS_KEY,), max_priority=10),
)


@pytest.fixture
def backends() -> Iterator[list[str]]:
    with ThreadServer(fake_backend_app(FakeState())) as b0, ThreadServer(fake_backend_app(FakeState())) as b1:
        yield [b0.url, b1.url]


def _post(url: str, key: str, priority: int, session: str | None = None) -> httpx.Response:
    headers = {"authorization": f"Bearer {key}"} | ({"x-flatshare-session": session} if session else {})
    body: dict[str, Any] = {"model": "fake", "prompt": "hi", "max_tokens": 4, "priority": priority}
    return httpx.post(f"{url}/v1/completions", json=body, headers=headers, timeout=30)


def _event(url: str, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(
        f"{url}/gateway/events", json=body, headers={"authorization": f"Bearer {ADMIN}"}, timeout=10
    )


def _counter(url: str, name: str) -> float:
    return scrape(url)[f"flatshare_gateway_baseline_counter{{baseline=leaseholder,counter={name}}}"]


def test_a_tenant_naming_another_tenants_session_moves_nothing_of_theirs(backends: list[str]) -> None:
    config = gateway_config(
        backends,
        policy="round-robin",
        tenants=TENANTS,
        admin_token=ADMIN,
        expose_metrics=True,
        baseline="leaseholder",
        baseline_settings={"lease_s": 15, "max_hold_s": 15},
    )
    with running_gateway(config) as (_, url), ThreadPoolExecutor(2) as pool:
        voice = _post(url, VOICE_KEY, -10, "call-42")
        hostile = _post(url, AGENTS_KEY, 10, "call-42")  # the agents tenant names the voice tenant's session
        assert voice.status_code == hostile.status_code == 200
        victim, other = voice.headers["x-flatshare-backend"], hostile.headers["x-flatshare-backend"]
        assert victim != other  # round-robin: the hostile request went to the other backend

        missing = _event(url, {"kind": "caller_speaking", "session": "call-42"})
        assert missing.status_code == 400 and "needs tenant" in missing.text  # sessions are per tenant
        unknown = _event(url, {"kind": "caller_speaking", "session": "call-42", "tenant": "nobody"})
        assert unknown.status_code == 400 and "unknown tenant" in unknown.text
        assert (
            _event(url, {"kind": "caller_speaking", "session": "call-42", "tenant": "voice"}).status_code
            == 200
        )

        # the lease is on the voice tenant's backend: an agent there waits, an agent on the other runs
        agents: list[Future[httpx.Response]] = [pool.submit(_post, url, AGENTS_KEY, 10) for _ in range(2)]
        wait_for(lambda: any(a.done() for a in agents), 20, "an agent on the unleased backend to finish")
        done = [a.result() for a in agents if a.done()]
        waiting = [a for a in agents if not a.done()]
        assert len(done) == 1 and done[0].headers["x-flatshare-backend"] == other
        assert _counter(url, "deferred") == 1 and _counter(url, "leases") == 1

        # the voice tenant's next turn ends it: the held agent goes
        assert _post(url, VOICE_KEY, -10, "call-42").status_code == 200
        assert [a.result(timeout=10).headers["x-flatshare-backend"] for a in waiting] == [victim]


def test_session_header_is_bounded(backends: list[str]) -> None:
    with running_gateway(gateway_config(backends, tenants=TENANTS)) as (_, url):
        assert _post(url, VOICE_KEY, 0, "s" * 256).status_code == 200
        long = _post(url, VOICE_KEY, 0, "s" * 257)
        assert long.status_code == 400 and "x-flatshare-session" in long.json()["error"]["message"]


def test_the_gates_session_map_stays_within_max_sessions(backends: list[str]) -> None:
    """Before: every request's session stayed in the gate's map for good (2,000 unique 16 KB sessions: +30.5
    MB, 2,000 more: +30.7 MB)."""
    config = gateway_config(backends, baseline="agent-cap", clients=ClientLimits(max_sessions=20))
    with running_gateway(config) as (gateway, url), httpx.Client(base_url=url, timeout=10) as client:
        for i in range(100):
            answer = client.post(
                "/v1/completions",
                json={"prompt": "hi", "max_tokens": 1},
                headers={"x-flatshare-session": f"session-{i}"},
            )
            assert answer.status_code == 200
        assert gateway.gate is not None
        assert len(gateway.gate.gate.session_backend) == 20
