"""DNS discovery trusts an answer no further than its settings (issue 32, item 6): only addresses in
`networks` (never link-local, multicast, broadcast or unspecified), at most `max_backends`, and backends
named opaquely so tenants do not see pod addresses. A real DNS server on loopback (dnslib) and fake
backends on 127.0.0.x."""

from __future__ import annotations

import re
from contextlib import ExitStack

import httpx
import pytest
from gatewaykit import backend_rows, scrape
from test_gateway_discovery import NAME, AddressServer, Zone, dns_server, free_port_on

from flatshare.gateway.config import GatewayConfig, PollConfig, TokenConfig
from flatshare.gateway.discovery import DiscoveryConfig
from kit.fake_vllm import FakeState, fake_backend_app
from kit.net import wait_for

pytest.importorskip("dnslib", reason="dnslib (the dev extra) runs the test's DNS server")

HOSTILE = ["169.254.169.254", "0.0.0.0", "8.8.8.8", "224.0.0.1", "255.255.255.255"]
POLL = PollConfig(interval_s=0.1, timeout_s=0.5, stale_after_s=1.0, unhealthy_after_failures=2)


def test_admit_refuses_what_no_backend_can_be() -> None:
    """Before: every one of these records became a backend, polled with the backend API key."""
    config = DiscoveryConfig(NAME)
    hostile = [*HOSTILE, "fe80::1", "::ffff:169.254.169.254", "ff02::1", "::"]
    admitted = config.admit([*hostile, "10.1.2.3", "127.0.0.5", "fd00::7", "192.168.1.1", "172.16.0.9"])
    assert admitted.addresses == ("10.1.2.3", "127.0.0.5", "172.16.0.9", "192.168.1.1", "fd00::7")
    assert sorted(address for address, _ in admitted.refused) == sorted(hostile)
    why = dict(admitted.refused)
    assert why["169.254.169.254"] == "link-local address" and why["8.8.8.8"] == "outside discover.networks"
    public = DiscoveryConfig(NAME, networks=("0.0.0.0/0",))
    assert public.admit(HOSTILE).addresses == ("8.8.8.8",)  # public only when configured; the rest never
    capped = DiscoveryConfig(NAME, max_backends=2).admit([f"10.0.0.{i}" for i in range(9, 0, -1)])
    assert capped.addresses == ("10.0.0.1", "10.0.0.2") and len(capped.refused) == 7
    for bad in ({"networks": ("10.0.0.0/33",)}, {"networks": ()}, {"max_backends": 0}):
        with pytest.raises(ValueError, match="discover"):
            DiscoveryConfig(NAME, **bad)  # type: ignore[arg-type]


def _gateway_config(nameserver: str, port: int, **discovery: object) -> GatewayConfig:
    discover = DiscoveryConfig(
        NAME, port=port, interval_s=0.1, timeout_s=0.5, nameserver=nameserver, **discovery
    )  # type: ignore[arg-type]
    return GatewayConfig(
        discover=(discover,), policy="round-robin", poll=POLL, tokens=TokenConfig(source="estimate")
    )


def test_hostile_records_never_become_backends_and_the_count_is_capped() -> None:
    from gatewaykit import running_gateway

    hosts = [f"127.0.0.{i}" for i in range(2, 6)]
    port = free_port_on(hosts)
    zone = Zone([*HOSTILE, *hosts])
    with ExitStack() as stack:
        nameserver = stack.enter_context(dns_server(zone))
        for host in hosts:
            stack.enter_context(AddressServer(fake_backend_app(FakeState()), host, port))
        _, url = stack.enter_context(running_gateway(_gateway_config(nameserver, port, max_backends=3)))
        rows = backend_rows(url)
        urls = sorted(row["url"] for row in rows.values())
        assert urls == [f"http://{host}:{port}" for host in hosts[:3]]
        refused = scrape(url)[f"flatshare_gateway_discovery_refused_total{{name={NAME}}}"]
        assert refused >= len(HOSTILE) + 1


def test_discovered_backends_are_named_opaquely_unless_exposed() -> None:
    """Before: backends were named `address:port`, and every tenant saw it in `x-flatshare-backend`."""
    from gatewaykit import running_gateway

    hosts = ["127.0.0.2", "127.0.0.3"]
    port = free_port_on(hosts)
    body = {"model": "fake", "prompt": "hi", "max_tokens": 2}
    with ExitStack() as stack:
        nameserver = stack.enter_context(dns_server(Zone(hosts)))
        for host in hosts:
            stack.enter_context(AddressServer(fake_backend_app(FakeState()), host, port))
        _, url = stack.enter_context(running_gateway(_gateway_config(nameserver, port)))
        wait_for(lambda: all(row["healthy"] for row in backend_rows(url).values()), 5, "both healthy")
        names = set(backend_rows(url))
        assert len(names) == 2 and all(re.fullmatch(r"vllm-[0-9a-f]{8}", name) for name in names), names
        assert {row["url"] for row in backend_rows(url).values()} == {f"http://{h}:{port}" for h in hosts}
        seen = set()
        for _ in range(4):
            answer = httpx.post(f"{url}/v1/completions", json=body, timeout=10)
            assert answer.status_code == 200
            seen.add(answer.headers["x-flatshare-backend"])
            assert "127.0.0" not in str(answer.headers)
        assert seen == names
        metrics_page = httpx.get(f"{url}/metrics", timeout=5).text
        assert "127.0.0.2" not in metrics_page
    with ExitStack() as stack:
        nameserver = stack.enter_context(dns_server(Zone(hosts)))
        _, url = stack.enter_context(
            running_gateway(_gateway_config(nameserver, port, expose_addresses=True))
        )
        assert set(backend_rows(url)) == {f"{h}:{port}" for h in hosts}
