"""`make_upstream`: the upstream client the config names (`flatshare.gateway.upstream.resolve_client`)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from flatshare.gateway.upstream import Upstream, resolve_client
from flatshare.gateway.upstream_httpx import HttpxUpstream


def make_upstream(
    kind: str,
    urls: Iterable[str],
    connect_timeout_s: float,
    read_timeout_s: float,
    max_connections: int,
    default_headers: Mapping[str, str] | None = None,
) -> Upstream:
    if resolve_client(kind, urls) == "native":
        from flatshare.gateway.upstream_native import NativeUpstream

        return NativeUpstream(connect_timeout_s, read_timeout_s, max_connections, default_headers)
    return HttpxUpstream(connect_timeout_s, read_timeout_s, max_connections, default_headers)
