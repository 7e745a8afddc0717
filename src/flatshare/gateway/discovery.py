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

An answer is trusted no further than the settings allow (`admit`): only addresses inside `networks`
(default: loopback and the private ranges, `PRIVATE_NETWORKS`) become backends, and never a link-local
(169.254.0.0/16 with the cloud metadata service, fe80::/10), multicast, broadcast, unspecified or
reserved address, whatever `networks` says; an IPv4 address written as IPv6 (`::ffff:a.b.c.d`) is
judged as the IPv4 address. At most `max_backends` addresses are taken (the lowest, so the choice is
stable). Backends are named opaquely (`membership.py`) unless `expose_addresses` is set.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable
from dataclasses import dataclass

_LABEL = re.compile(r"^(?!-)[a-z0-9-]{1,63}(?<!-)$")
SCHEMES = ("http", "https")
PRIVATE_NETWORKS = (
    "127.0.0.0/8",
    "10.0.0.0/8",
    "172.16.0.0/12",
    "192.168.0.0/16",
    "::1/128",
    "fc00::/7",
)
"""Where discovered backends may live by default: loopback and the private ranges (RFC 1918, RFC 4193)."""
MAX_BACKENDS = 64
IpNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
IpAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


@dataclass(frozen=True)
class DiscoveryConfig:
    """One DNS name to follow (a `[[discover]]` table of the gateway's config file).

    `name`: the DNS name, e.g. `vllm.flatshare.svc.cluster.local` (a headless Service). `port`: the
    port every address serves on. `interval_s`: how often the name is resolved again; `timeout_s`
    bounds one lookup. `nameserver`: `host` or `host:port` of the DNS server to ask (empty: the
    system's, from /etc/resolv.conf, with its search domains, as in a pod). `networks`: the CIDR ranges
    an address must lie in (module docstring; add e.g. `"0.0.0.0/0"` to admit public addresses).
    `max_backends`: the most addresses taken from one answer. `expose_addresses`: name backends
    `address:port` (tenants see it in `x-flatshare-backend`) instead of an opaque name."""

    name: str
    port: int = 8000
    scheme: str = "http"
    interval_s: float = 5.0
    timeout_s: float = 2.0
    nameserver: str = ""
    networks: tuple[str, ...] = PRIVATE_NETWORKS
    max_backends: int = MAX_BACKENDS
    expose_addresses: bool = False

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
        if not 1 <= self.max_backends <= 10_000:
            raise ValueError(f"discover.max_backends must lie in 1..10000, got {self.max_backends}")
        if not self.parsed_networks():
            raise ValueError("discover.networks must name at least one range")

    def parsed_networks(self) -> tuple[IpNetwork, ...]:
        """`networks` as network objects; ValueError naming the key when one is not a CIDR range."""
        try:
            return tuple(ipaddress.ip_network(n) for n in self.networks)
        except (ValueError, TypeError) as exc:
            raise ValueError(f"discover.networks: {exc} (give CIDR ranges such as 10.0.0.0/8)") from None

    def admit(self, addresses: Iterable[str]) -> Admitted:
        """Which of an answer's addresses may become backends (module docstring)."""
        taken: list[IpAddress] = []
        refused: list[tuple[str, str]] = []
        networks = self.parsed_networks()
        for text in addresses:
            address, why = _judge(text, networks)
            if address is None:
                refused.append((text, why))
            else:
                taken.append(address)
        taken.sort(key=lambda a: (a.version, a))
        over = [(str(a), f"over max_backends ({self.max_backends})") for a in taken[self.max_backends :]]
        kept = tuple(str(a) for a in taken[: self.max_backends])
        return Admitted(kept, tuple(sorted(refused)) + tuple(over))

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
class Admitted:
    """One answer judged: the addresses taken (sorted), and each refused one with why."""

    addresses: tuple[str, ...]
    refused: tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class MembershipChange:
    """What one answer changes: URLs to add and URLs to remove, each sorted."""

    added: tuple[str, ...]
    removed: tuple[str, ...]

    @property
    def empty(self) -> bool:
        return not self.added and not self.removed


def _judge(text: str, networks: tuple[IpNetwork, ...]) -> tuple[IpAddress | None, str]:
    """The address, or None and why it is refused (module docstring)."""
    try:
        address: IpAddress = ipaddress.ip_address(text)
    except ValueError:
        return None, "not an IP address"
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    if address.is_loopback:
        kinds = []
    else:
        kinds = [
            ("link-local", address.is_link_local),
            ("multicast", address.is_multicast),
            ("unspecified", address.is_unspecified),
            ("broadcast", address == ipaddress.IPv4Address("255.255.255.255")),
            ("reserved", address.is_reserved),
        ]
    for kind, hit in kinds:
        if hit:
            return None, f"{kind} address"
    if not any(address.version == n.version and address in n for n in networks):
        return None, "outside discover.networks"
    return address, ""


def membership_change(current: Iterable[str], resolved: Iterable[str]) -> MembershipChange:
    """The change from the URLs a discovery has now to the URLs of its latest answer."""
    now, then = set(resolved), set(current)
    return MembershipChange(tuple(sorted(now - then)), tuple(sorted(then - now)))
