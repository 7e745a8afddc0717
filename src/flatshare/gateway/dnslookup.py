"""Asking DNS for a discovery's addresses (dnspython's asyncio resolver, never the blocking system call).

`resolve_addresses(config)` returns the A addresses of `config.name`, or its AAAA addresses when it has
no A record (both asked together, each bounded by `timeout_s`): one address per pod on IPv4, IPv6 and
dual-stack clusters alike, where a headless Service answers each pod's IPv4 and IPv6 address and taking
both would make one pod two backends. An empty set when the name does not exist or has no such records, and
raises `DiscoveryError` when the server cannot be asked or fails (timeout, SERVFAIL, refused): the
caller keeps what it had. No answer is cached here, so every interval sees the server's current records.
"""

from __future__ import annotations

import asyncio

import dns.asyncresolver
import dns.exception
import dns.resolver

from flatshare.gateway.discovery import DiscoveryConfig


class DiscoveryError(Exception):
    """The DNS server could not be asked or did not answer."""


def make_resolver(config: DiscoveryConfig) -> dns.asyncresolver.Resolver:
    """The system's resolver (resolv.conf, search domains), or one asking `config.nameserver` only."""
    server = config.server()
    if server is None:
        resolver = dns.asyncresolver.Resolver(configure=True)
    else:
        resolver = dns.asyncresolver.Resolver(configure=False)
        resolver.nameservers = [server[0]]
        resolver.port = server[1]
    resolver.lifetime = config.timeout_s
    resolver.timeout = config.timeout_s
    resolver.cache = None
    return resolver


async def resolve_addresses(config: DiscoveryConfig, resolver: dns.asyncresolver.Resolver) -> set[str]:
    """The A addresses of `config.name`, else its AAAA addresses (see module docstring)."""
    search = config.server() is None
    answers = await asyncio.gather(
        *(_query(resolver, config.name, rdtype, search) for rdtype in ("A", "AAAA")), return_exceptions=True
    )
    found: list[set[str]] = []
    for answer in answers:
        if isinstance(answer, BaseException):
            raise DiscoveryError(f"{config.name}: {type(answer).__name__}: {answer}") from answer
        found.append(answer)
    ipv4, ipv6 = found
    return ipv4 or ipv6


async def _query(resolver: dns.asyncresolver.Resolver, name: str, rdtype: str, search: bool) -> set[str]:
    try:
        answer = await resolver.resolve(name, rdtype, search=search, raise_on_no_answer=False)
    except dns.resolver.NXDOMAIN:
        return set()
    return {record.to_text() for record in answer}
