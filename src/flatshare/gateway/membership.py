"""Backends that come and go: DNS discovery applied to the pool, with pollers, audit lines and metrics.

`Membership` owns the discovered part of the `BackendPool` (configured backends are never touched).
For each `[[discover]]` entry a task resolves the name at once and then every `interval_s`
(`dnslookup.resolve_addresses`), and applies `discovery.membership_change`:

- an address that appeared (and that the discovery admits: `DiscoveryConfig.admit`, its networks and
  `max_backends`) becomes a backend, gets a poller (first poll at once) and takes requests from its
  first good poll on (the pool's health rule; no request before). Its name is opaque,
  `<first label of the DNS name>-<8 hex digits>` (an HMAC of the URL under a key drawn when the gateway
  starts: stable while it runs, and no tenant can tell a pod's address from it in `x-flatshare-backend`;
  `expose_addresses` names it `address:port` instead). The URL is in `/gateway/backends` (admin) and in
  the audit log;
- an address that vanished leaves the pool at once (no snapshot, no candidate, no new request) and its
  poller stops; requests already proxied to it keep their connections and finish (a terminating pod
  keeps serving through its grace period);
- a failed lookup changes nothing and is counted; so does any other exception while applying an
  answer (`watch.TaskWatch`: logged once, counted, the loop goes on). Refused addresses are logged
  once per address and counted.

Audit lines (`kind` = `membership`): `{"kind", "t", "change", "backend", "url", "source"}` with
`change` one of `added`, `healthy`, `unhealthy`, `removed`, for discovered backends (configured ones
never join or leave; their health flips are logged, as before). Metrics (read at scrape time):
`flatshare_gateway_membership_changes_total{change}`, `flatshare_gateway_backends{source}` (members by
where they came from: `static` or the DNS name), `flatshare_gateway_discovery_errors_total{name}`,
`flatshare_gateway_discovery_age_seconds{name}` (since the last answer),
`flatshare_gateway_discovery_refused_total{name}` (addresses refused, each time an answer held them),
and the task watch's `flatshare_gateway_task_up{task}` and `flatshare_gateway_task_errors_total{task,
error}` for every poller and discovery.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import logging
import math
import secrets
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence

from dns.asyncresolver import Resolver
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from flatshare.aiotasks import cancel
from flatshare.gateway.audit import AuditLog
from flatshare.gateway.backends import BackendPool, BackendState
from flatshare.gateway.config import BackendConfig
from flatshare.gateway.discovery import DiscoveryConfig, membership_change
from flatshare.gateway.dnslookup import DiscoveryError, make_resolver, resolve_addresses
from flatshare.gateway.poller import Poller
from flatshare.gateway.upstream import Upstream
from flatshare.gateway.watch import TaskWatch

log = logging.getLogger(__name__)
CHANGES = ("added", "healthy", "unhealthy", "removed")
STATIC = "static"


class Membership:
    """The pool's discovered members and their pollers (module docstring)."""

    def __init__(
        self,
        pool: BackendPool,
        upstream: Upstream,
        audit: AuditLog,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.pool = pool
        self.upstream = upstream
        self.audit = audit
        self.clock = clock
        self.wall = wall
        self.changes: Counter[str] = Counter({change: 0 for change in CHANGES})
        self.errors: Counter[str] = Counter()
        self.last_answer_s: dict[str, float] = {}
        self.sources: dict[str, str] = {state.name: STATIC for state in pool.states}
        self.pollers: dict[str, Poller] = {}
        self.refused: Counter[str] = Counter()
        self.watch = TaskWatch()
        self._tasks: list[asyncio.Task[None]] = []
        self._names: dict[str, str] = {}  # URL -> backend name, for discovered backends
        self._warned: set[tuple[str, str]] = set()
        self._key = secrets.token_bytes(16)

    def poller(self, state: BackendState) -> Poller:
        """A poller for `state` that reports its health flips here."""
        return Poller(state, self.upstream, self.clock, on_health=self._health_changed, watch=self.watch)

    def backend_name(self, discovery: DiscoveryConfig, address: str) -> str:
        """A discovered backend's name (module docstring)."""
        url = discovery.url(address)
        if discovery.expose_addresses:
            return BackendConfig(url).name
        digest = hmac.new(self._key, url.encode(), hashlib.sha256).hexdigest()[:8]
        return f"{discovery.name.split('.')[0]}-{digest}"

    async def start(self, discoveries: Sequence[DiscoveryConfig]) -> None:
        """Resolve every name once (and poll what it found once), then follow each in a task."""
        first = [self._round(d, make_resolver(d), start_pollers=False) for d in discoveries]
        await asyncio.gather(*first)
        for poller in list(self.pollers.values()):
            poller.start()
        self._tasks = [self.watch.start(f"discover-{d.name}", self._follow(d)) for d in discoveries]

    async def stop(self) -> None:
        tasks, self._tasks = self._tasks, []
        await cancel(*tasks)
        for poller in self.pollers.values():
            await poller.stop()
        self.pollers.clear()

    async def _follow(self, discovery: DiscoveryConfig) -> None:
        resolver = make_resolver(discovery)
        while True:
            await asyncio.sleep(discovery.interval_s)
            await self._round(discovery, resolver, start_pollers=True)

    async def _round(self, discovery: DiscoveryConfig, resolver: Resolver, start_pollers: bool) -> None:
        """`refresh`, surviving anything it raises: counted, logged once per kind until a good round."""
        task = f"discover-{discovery.name}"
        try:
            if await self.refresh(discovery, resolver, start_pollers=start_pollers):
                self.watch.ok(task)
        except Exception as exc:  # an answer the code did not expect: counted, logged once, next round
            if self.watch.caught(task, exc):
                log.error("discovery %s: round failed: %s: %s", discovery.name, type(exc).__name__, exc)

    async def refresh(
        self, discovery: DiscoveryConfig, resolver: Resolver, start_pollers: bool = False
    ) -> bool:
        """Resolve `discovery` once and apply the answer; False when the lookup failed (nothing changed)."""
        try:
            addresses = await resolve_addresses(discovery, resolver)
        except DiscoveryError as exc:
            self.errors[discovery.name] += 1
            self.watch.caught(f"discover-{discovery.name}", exc)
            log.warning(
                "discovery %s failed, keeping %d backends: %s", discovery.name, self._count(discovery), exc
            )
            return False
        self.last_answer_s[discovery.name] = self.clock()
        admitted = discovery.admit(addresses)
        self._refused(discovery, admitted.refused)
        current = [s.config.url for s in self.pool.states if self.sources.get(s.name) == discovery.name]
        wanted = {discovery.url(a): self.backend_name(discovery, a) for a in admitted.addresses}
        change = membership_change(current, wanted)
        for url in change.removed:
            await self._remove(url, discovery.name)
        new = [p for url in change.added if (p := self._add(url, wanted[url], discovery.name)) is not None]
        if start_pollers:
            for poller in new:
                poller.start()
        else:
            await asyncio.gather(*(poller.poll_once() for poller in new))
        return True

    def _refused(self, discovery: DiscoveryConfig, refused: tuple[tuple[str, str], ...]) -> None:
        """Count refused addresses; log each (address, reason) once."""
        self.refused[discovery.name] += len(refused)
        for address, why in refused:
            if (address, why) not in self._warned and len(self._warned) < 10_000:
                self._warned.add((address, why))
                log.warning("discovery %s: refused %s (%s)", discovery.name, address, why)

    def _add(self, url: str, name: str, source: str) -> Poller | None:
        config = BackendConfig(url, name)
        known = {state.config.url for state in self.pool.states}
        if config.name in self.pool.by_name or url in known:  # configured, or another name's already
            return None
        state = self.pool.add(config)
        self._names[url] = state.name
        self.sources[state.name] = source
        self._record("added", state, source)
        poller = self.pollers[state.name] = self.poller(state)
        return poller

    async def _remove(self, url: str, source: str) -> None:
        name = self._names.pop(url)
        state = self.pool.remove(name)
        self.sources.pop(name, None)
        self._record("removed", state, source)
        poller = self.pollers.pop(name, None)
        if poller is not None:
            await poller.stop()

    def _count(self, discovery: DiscoveryConfig) -> int:
        return sum(1 for source in self.sources.values() if source == discovery.name)

    def _health_changed(self, state: BackendState, healthy: bool) -> None:
        source = self.sources.get(state.name, STATIC)
        if (
            source != STATIC and state.name in self.pool.by_name
        ):  # configured backends: as before, logged only
            self._record("healthy" if healthy else "unhealthy", state, source)

    def _record(self, change: str, state: BackendState, source: str) -> None:
        self.changes[change] += 1
        log.info("backend %s (%s): %s [%s]", state.name, state.config.url, change, source)
        record = {"kind": "membership", "t": self.wall(), "change": change, "backend": state.name}
        self.audit.write(record | {"url": state.config.url, "source": source})

    def collector(self) -> Collector:
        return _MembershipCollector(self)


class _MembershipCollector(Collector):
    def __init__(self, membership: Membership) -> None:
        self.m = membership

    def collect(self) -> Iterator[Metric]:
        m = self.m
        changes = CounterMetricFamily(
            "flatshare_gateway_membership_changes",
            "Backends added, turned healthy or unhealthy, and removed.",
            labels=["change"],
        )
        for change, count in sorted(m.changes.items()):
            changes.add_metric([change], float(count))
        yield changes
        members = GaugeMetricFamily(
            "flatshare_gateway_backends",
            "Backends in the pool now, by where they came from.",
            labels=["source"],
        )
        by_source = Counter(m.sources.get(state.name, STATIC) for state in m.pool.states)
        by_source.setdefault(STATIC, 0)
        for source, count in sorted(by_source.items()):
            members.add_metric([source], float(count))
        yield members
        errors = CounterMetricFamily(
            "flatshare_gateway_discovery_errors", "DNS lookups that failed, by name.", labels=["name"]
        )
        ages = GaugeMetricFamily(
            "flatshare_gateway_discovery_age_seconds",
            "Seconds since the name's last DNS answer.",
            labels=["name"],
        )
        now = m.clock()
        for name in sorted(set(m.errors) | set(m.last_answer_s)):
            errors.add_metric([name], float(m.errors[name]))
            ages.add_metric([name], now - m.last_answer_s.get(name, -math.inf))
        yield errors
        yield ages
        refused = CounterMetricFamily(
            "flatshare_gateway_discovery_refused",
            "Addresses a DNS answer held that discovery refused (outside its networks, link-local, "
            "multicast, broadcast, unspecified, or over max_backends), counted each time.",
            labels=["name"],
        )
        for name in sorted(set(m.refused) | set(m.last_answer_s)):
            refused.add_metric([name], float(m.refused[name]))
        yield refused
        yield from m.watch.collector().collect()
