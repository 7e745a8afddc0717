"""DNS discovery: the gateway follows a name on a real DNS server (dnslib, on loopback) that the test
changes while the gateway runs; serve-sim backends listen on 127.0.0.2, 127.0.0.3, ... at one port, as
pods behind a headless Service do."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from gatewaykit import backend_rows, gateway_config, read_events, running_gateway, scrape

from flatshare.errors import InputError
from flatshare.gateway.config import GatewayConfig, PollConfig, TokenConfig
from flatshare.gateway.configfile import load_config
from flatshare.gateway.discovery import DiscoveryConfig, membership_change
from flatshare.gateway.dnslookup import DiscoveryError, make_resolver, resolve_addresses
from kit.fake_vllm import FakeState, fake_backend_app
from kit.net import ThreadServer, wait_for

dnslib = pytest.importorskip("dnslib", reason="dnslib (the dev extra) runs the test's DNS server")
from dnslib import AAAA, QTYPE, RR, A  # noqa: E402
from dnslib.server import BaseResolver, DNSServer  # noqa: E402

NAME = "vllm.flatshare.test"
SERVFAIL = 2


# -- pure parts ---------------------------------------------------------------------------------------------
def test_membership_change_adds_what_appeared_and_removes_what_vanished() -> None:
    change = membership_change(["http://10.0.0.1:8000", "http://10.0.0.2:8000"], ["http://10.0.0.2:8000"])
    assert change.added == () and change.removed == ("http://10.0.0.1:8000",)
    assert membership_change(["u"], ["u"]).empty
    assert membership_change([], ["b", "a"]).added == ("a", "b")


def test_discovery_config_checks_and_builds_urls() -> None:
    d = DiscoveryConfig("VLLM.flatshare.svc.cluster.local.", port=8000, nameserver="10.96.0.10")
    assert d.name == "vllm.flatshare.svc.cluster.local" and d.server() == ("10.96.0.10", 53)
    assert d.url("10.1.2.3") == "http://10.1.2.3:8000" and d.url("fd00::5") == "http://[fd00::5]:8000"
    assert DiscoveryConfig("x", nameserver="127.0.0.1:5353").server() == ("127.0.0.1", 5353)
    assert DiscoveryConfig("x", nameserver="[::1]:5353").server() == ("::1", 5353)
    for bad, message in [
        ({"name": "bad_name!"}, "discover.name"),
        ({"name": "x", "port": 0}, "discover.port"),
        ({"name": "x", "scheme": "ftp"}, "discover.scheme"),
        ({"name": "x", "interval_s": 0}, "interval_s"),
        ({"name": "x", "nameserver": "dns.local"}, "discover.nameserver"),
        ({"name": "x", "nameserver": "127.0.0.1:99999"}, "discover.nameserver"),
    ]:
        with pytest.raises(ValueError, match=message):
            DiscoveryConfig(**bad)


def test_config_file_discover_tables(tmp_path: Path) -> None:
    path = tmp_path / "gw.toml"
    path.write_text(f'[[discover]]\nname = "{NAME}"\nport = 8000\ninterval_s = 2.0\n')
    config = load_config(path)
    assert config.backends == () and config.discover == (DiscoveryConfig(NAME, 8000, interval_s=2.0),)
    path.write_text('[[discover]]\nname = "x"\nport = "8000"\n')
    with pytest.raises(InputError, match=r"discover\[0\].port must be int"):
        load_config(path)
    path.write_text("port = 1\n")
    with pytest.raises(InputError, match="give at least one backend"):
        load_config(path)


# -- a DNS server the test changes --------------------------------------------------------------------------
@dataclass
class Zone(BaseResolver):  # type: ignore[misc]
    """A records for `NAME`, changed by the test while the server answers (thread-safe)."""

    addresses: list[str] = field(default_factory=list)
    addresses6: list[str] = field(default_factory=list)
    fail: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)

    def set(self, *addresses: str) -> None:
        with self.lock:
            self.addresses = list(addresses)

    def resolve(self, request: Any, handler: Any) -> Any:
        reply = request.reply()
        with self.lock:
            if self.fail:
                reply.header.rcode = SERVFAIL
                return reply
            qname = str(request.q.qname).rstrip(".")
            if qname != NAME:
                reply.header.rcode = 3  # NXDOMAIN
            elif request.q.qtype == QTYPE.A:
                for address in self.addresses:
                    reply.add_answer(RR(request.q.qname, QTYPE.A, rdata=A(address), ttl=1))
            elif request.q.qtype == QTYPE.AAAA:
                for address in self.addresses6:
                    reply.add_answer(RR(request.q.qname, QTYPE.AAAA, rdata=AAAA(address), ttl=1))
        return reply


class _Quiet:
    def __getattr__(self, name: str) -> Any:
        return lambda *args, **kwargs: None


@contextmanager
def dns_server(zone: Zone) -> Iterator[str]:
    """A UDP DNS server on 127.0.0.1 (a free port); yields `host:port`."""
    server = DNSServer(zone, address="127.0.0.1", port=0, logger=_Quiet())
    server.start_thread()
    try:
        yield f"127.0.0.1:{server.server.server_address[1]}"
    finally:
        server.stop()


def test_lookup_against_a_real_dns_server() -> None:
    """A records; AAAA only without A (one address per pod on dual-stack clusters); NXDOMAIN is an empty
    answer; SERVFAIL is an error (the caller keeps its backends)."""
    zone = Zone(["10.0.0.7", "10.0.0.8"], ["fd00::7"])

    def lookup(name: str = NAME) -> set[str]:
        config = DiscoveryConfig(name, nameserver=server, timeout_s=2.0)
        return asyncio.run(resolve_addresses(config, make_resolver(config)))

    with dns_server(zone) as server:
        assert lookup() == {"10.0.0.7", "10.0.0.8"}
        zone.set()
        assert lookup() == {"fd00::7"}
        assert lookup("other.flatshare.test") == set()
        zone.fail = True
        with pytest.raises(DiscoveryError, match=NAME):
            lookup()


# -- serve-sim on several loopback addresses at one port ------------------------------------------------------
class AddressServer:
    """An ASGI app served by uvicorn in a thread on `host:port` (any loopback address)."""

    def __init__(self, app: Any, host: str, port: int) -> None:
        self.socket = socket.socket()
        self.socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.socket.bind((host, port))
        self.url = f"http://{host}:{port}"
        config = uvicorn.Config(app, log_level="warning", lifespan="on", timeout_graceful_shutdown=2)
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.socket]}, daemon=True)

    def __enter__(self) -> AddressServer:
        self.thread.start()
        wait_for(lambda: self.server.started, 60, f"{self.url} to start")
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(10)
        self.socket.close()


def free_port_on(hosts: list[str]) -> int:
    """A port free on every one of `hosts` (tries a few)."""
    for _ in range(50):
        probe = socket.socket()
        probe.bind((hosts[0], 0))
        port = int(probe.getsockname()[1])
        probe.close()
        try:
            for host in hosts:
                with socket.socket() as s:
                    s.bind((host, port))
            return port
        except OSError:
            continue
    raise AssertionError("no port free on every address")


def audit_lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def completion(url: str, max_tokens: int = 1) -> tuple[str, str]:
    """(backend, text) of one short non-streaming completion through the gateway."""
    body = {"model": "sim", "prompt": "hello there", "max_tokens": max_tokens}
    answer = httpx.post(f"{url}/v1/completions", json=body, timeout=30)
    assert answer.status_code == 200, answer.text
    return answer.headers["x-flatshare-backend"], answer.text


@pytest.mark.vllm
def test_gateway_follows_dns_answers_while_it_runs(tmp_path: Path) -> None:
    from flatshare.serve.server import build_sim_app
    from flatshare.sim.config import EngineConfig
    from flatshare.sim.profile import load_profile

    hosts = ["127.0.0.2", "127.0.0.3"]
    port = free_port_on(hosts)
    names = [f"{host}:{port}" for host in hosts]
    audit = tmp_path / "audit.jsonl"
    # 0.5 s polls (the gateway polls every 0.1 s by default): two intervals, the bound below, leave room for
    # a loaded machine (at 0.1 s it once took 0.30 s with other jobs on both cores)
    poll = PollConfig(interval_s=0.5, timeout_s=0.5, stale_after_s=2.0, unhealthy_after_failures=2)
    zone = Zone([hosts[0]])
    with ExitStack() as stack:
        nameserver = stack.enter_context(dns_server(zone))
        for host in hosts:
            app = build_sim_app(EngineConfig(kv_tokens=32768, max_model_len=4096), load_profile(), seed=0)
            stack.enter_context(AddressServer(app, host, port))
        discover = DiscoveryConfig(
            NAME, port=port, interval_s=0.2, timeout_s=0.5, nameserver=nameserver, expose_addresses=True
        )
        config = GatewayConfig(
            discover=(discover,),
            policy="round-robin",
            poll=poll,
            tokens=TokenConfig(source="estimate"),
            audit_log=str(audit),
        )
        _, url = stack.enter_context(running_gateway(config))

        # the first answer: one backend, routable from the start
        assert set(backend_rows(url)) == {names[0]}
        assert {completion(url)[0] for _ in range(4)} == {names[0]}

        # a pod becomes ready: its address joins, is polled, takes traffic once healthy
        changed_at = time.time()
        zone.set(*hosts)
        seen: list[tuple[float, str]] = []
        stop = threading.Event()

        def load() -> None:
            while not stop.is_set():
                seen.append((time.time(), completion(url)[0]))

        with ThreadPoolExecutor(4) as pool:
            workers = [pool.submit(load) for _ in range(4)]
            wait_for(lambda: any(name == names[1] for _, name in seen), 10, "the new backend to take traffic")
            stop.set()
            for worker in workers:
                worker.result()
        time.sleep(0.3)  # the audit log is flushed every 0.1 s
        lines = audit_lines(audit)
        joined = [r for r in lines if r.get("kind") == "membership" and r["backend"] == names[1]]
        assert [r["change"] for r in joined[:2]] == ["added", "healthy"], joined
        healthy_t = joined[1]["t"]
        decisions = [r for r in lines if "kind" not in r and r["t"] > healthy_t]
        assert decisions and all(names[1] in r["candidates"] for r in decisions)
        first = min(r["t"] for r in decisions if r["backend"] == names[1])
        join_s, take_s = healthy_t - changed_at, first - healthy_t
        print(f"dns change -> healthy {join_s:.3f} s, healthy -> first request {take_s:.3f} s")
        assert take_s <= 2 * poll.interval_s, (join_s, take_s)

        # streams in flight on the second backend, then its record vanishes: no new request there,
        # and the streams already sent finish whole
        def stream(index: int) -> tuple[str, list[str]]:
            body = {"model": "sim", "prompt": f"story {index}", "max_tokens": 120, "stream": True}
            with httpx.stream("POST", f"{url}/v1/completions", json=body, timeout=60) as answer:
                assert answer.status_code == 200
                return answer.headers["x-flatshare-backend"], read_events(answer)

        with ThreadPoolExecutor(4) as pool:
            streams = [pool.submit(stream, i) for i in range(4)]
            wait_for(lambda: scrape(url)["flatshare_gateway_requests_in_flight{}"] >= 4, 10, "4 streams")
            zone.set(hosts[0])
            wait_for(lambda: names[1] not in backend_rows(url), 5, "the vanished backend to leave")
            in_flight_left = scrape(url)["flatshare_gateway_requests_in_flight{}"]
            after = [completion(url)[0] for _ in range(10)]
            results = [s.result() for s in streams]
        assert in_flight_left >= 1, "the streams should still run when the backend left"
        assert after == [names[0]] * 10
        on_removed = [events for backend, events in results if backend == names[1]]
        assert on_removed, "round-robin should have sent some of the streams to the second backend"
        for events in on_removed:
            assert events[-1] == "[DONE]" and not any('"error"' in e for e in events[:-1])
            tokens = sum(len(json.loads(e)["choices"][0]["text"]) > 0 for e in events[:-1])
            assert tokens >= 100, tokens

        # a DNS outage changes nothing; the metrics and the audit log record every change
        zone.fail = True
        wait_for(
            lambda: scrape(url).get(f"flatshare_gateway_discovery_errors_total{{name={NAME}}}", 0) >= 2, 5
        )
        assert set(backend_rows(url)) == {names[0]}
        metrics = scrape(url)
        assert metrics["flatshare_gateway_membership_changes_total{change=added}"] == 2
        assert metrics["flatshare_gateway_membership_changes_total{change=removed}"] == 1
        assert metrics[f"flatshare_gateway_backends{{source={NAME}}}"] == 1
    time.sleep(0.2)
    changes = [(r["change"], r["backend"]) for r in audit_lines(audit) if r.get("kind") == "membership"]
    assert changes[:1] == [("added", names[0])] and ("removed", names[1]) in changes


def test_static_backends_export_membership_metrics() -> None:
    """Without discovery the membership metrics are there (the dashboard's panels read them)."""
    with ExitStack() as stack:
        backend = stack.enter_context(ThreadServer(fake_backend_app(FakeState())))
        _, url = stack.enter_context(running_gateway(gateway_config([backend.url])))
        metrics = scrape(url)
    assert metrics["flatshare_gateway_backends{source=static}"] == 1
    assert metrics["flatshare_gateway_membership_changes_total{change=added}"] == 0
