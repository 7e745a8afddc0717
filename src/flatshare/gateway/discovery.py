"""Backends found by DNS (a Kubernetes headless Service): the settings and the pure membership rule.

A headless Service (`clusterIP: None`) answers its name with one A (or AAAA) record per *ready* pod
(Kubernetes docs, "DNS for Services and Pods": headless Services; `publishNotReadyAddresses` off by
default). The gateway re-resolves the name every `interval_s` and makes each address one backend,
`scheme://address:port`; `membership.py` adds and removes them, `dnslookup.py` asks the DNS server.

`membership_change(current, resolved)` is the whole rule, with no I/O: addresses that appeared are
added (polled, and routable once a poll is good), addresses that vanished are removed (no new requests;
requests already sent finish on their open connections). A failed lookup (timeout, SERVFAIL) changes
nothing: a DNS outage must not empty the gateway. An empty answer (NXDOMAIN, no records) is an answer:
zero ready pods.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable
from dataclasses import dataclass

_LABEL = re.compile(r"^(?!-)[a-z0-9-]{1,63}(?<!-)$")
SCHEMES = ("http", "https")


@dataclass(frozen=True)
class DiscoveryConfig:
    """One DNS name to follow (a `[[discover]]` table of the gateway's config file).

    `name`: the DNS name, e.g. `vllm.flatshare.svc.cluster.local` (a headless Service). `port`: the
    port every address serves on. `interval_s`: how often the name is resolved again; `timeout_s`
    bounds one lookup. `nameserver`: `host` or `host:port` of the DNS server to ask (empty: the
    system's, from /etc/resolv.conf, with its search domains, as in a pod)."""

    name: str
    port: int = 8000
    scheme: str = "http"
    interval_s: float = 5.0
    timeout_s: float = 2.0
    nameserver: str = ""

    def __post_init__(self) -> None:
        name = self.name.rstrip(".").lower()
        if not name or len(name) > 253 or not all(_LABEL.match(label) for label in name.split(".")):
            raise ValueError(f"discover.name must be a DNS name, got {self.name!r}")
        object.__setattr__(self, "name", name)
        if not 1 <= self.port <= 65535:
            raise ValueError(f"discover.port must lie in 1..65535, got {self.port}")
        if self.scheme not in SCHEMES:
            raise ValueError(f"discover.scheme must be http or https, got {self.scheme!r}")
        if not self.interval_s > 0 or not self.timeout_s > 0:
            raise ValueError("discover.interval_s and discover.timeout_s must be > 0")
        if self.nameserver:
            self.server()  # validates

    def server(self) -> tuple[str, int] | None:
        """`(address, port)` of the configured DNS server, None for the system's."""
        if not self.nameserver:
            return None
        host, port = self.nameserver, 53
        if host.count(":") == 1 or host.startswith("["):  # host:port or [v6]:port
            host, _, text = host.rpartition(":")
            host = host.strip("[]")
            if not (text.isascii() and text.isdigit() and len(text) <= 5) or not 1 <= int(text) <= 65535:
                raise ValueError(f"discover.nameserver port must lie in 1..65535, got {self.nameserver!r}")
            port = int(text)
        try:
            ipaddress.ip_address(host)
        except ValueError as exc:
            raise ValueError(
                f"discover.nameserver must be an IP address[:port], got {self.nameserver!r}"
            ) from exc
        return host, port

    def url(self, address: str) -> str:
        """The backend URL of one resolved address (IPv6 in brackets)."""
        host = f"[{address}]" if ":" in address else address
        return f"{self.scheme}://{host}:{self.port}"


@dataclass(frozen=True)
class MembershipChange:
    """What one answer changes: URLs to add and URLs to remove, each sorted."""

    added: tuple[str, ...]
    removed: tuple[str, ...]

    @property
    def empty(self) -> bool:
        return not self.added and not self.removed


def membership_change(current: Iterable[str], resolved: Iterable[str]) -> MembershipChange:
    """The change from the URLs a discovery has now to the URLs of its latest answer."""
    now, then = set(resolved), set(current)
    return MembershipChange(tuple(sorted(now - then)), tuple(sorted(then - now)))
