"""What flatshare's HTTP servers (`serve-sim`, the gateway) share under uvicorn: the listening socket,
bound before serving so a taken port is one `InputError` line (not uvicorn's traceback), and the access
log, which by default leaves out the routes pollers hit several times a second.

Access-log modes (`--access-log`): `requests` logs every request but the poll routes (`POLL_ROUTES`:
a gateway polls /metrics and /health of each backend several times a second, Prometheus scrapes
/metrics), `all` logs every request, `off` none.
"""

from __future__ import annotations

import logging
import socket
from typing import Any

from flatshare.errors import InputError

POLL_ROUTES = frozenset({"/metrics", "/health", "/v1/models"})
ACCESS_LOGS = ("requests", "all", "off")
ACCESS_LOGGER = "uvicorn.access"


def listen(host: str, port: int) -> socket.socket:
    """A socket bound to `host:port` (IPv4 or IPv6, as `host` resolves); InputError naming both when the
    address is not this machine's, cannot be resolved, or is taken."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
        sock = socket.socket(family, kind, proto)
    except (OSError, UnicodeError, ValueError) as exc:
        raise InputError(f"cannot listen on {host}:{port}: {exc}") from exc
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if family == socket.AF_INET6:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        sock.bind(address)
        sock.set_inheritable(True)
    except OSError as exc:
        sock.close()
        raise InputError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from exc
    return sock


def check_access_log(mode: str) -> str:
    """`mode` when it is one of `ACCESS_LOGS`; InputError listing them otherwise."""
    if mode not in ACCESS_LOGS:
        raise InputError(f"--access-log: {mode!r} is not one of {', '.join(ACCESS_LOGS)}")
    return mode


class PollRouteFilter(logging.Filter):
    """Drops uvicorn access-log records of `POLL_ROUTES` (the path without its query string)."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if isinstance(args, tuple) and len(args) >= 3:
            return str(args[2]).split("?", 1)[0] not in POLL_ROUTES
        return True


def access_log_option(mode: str) -> dict[str, Any]:
    """`uvicorn.Config`'s access-log setting for `mode`."""
    return {"access_log": check_access_log(mode) != "off"}


def filter_access_log(mode: str) -> None:
    """Install (mode `requests`) or remove the poll-route filter on uvicorn's access logger; call it after
    `uvicorn.Config` is made (it configures that logger)."""
    logger = logging.getLogger(ACCESS_LOGGER)
    for old in [f for f in logger.filters if isinstance(f, PollRouteFilter)]:
        logger.removeFilter(old)
    if check_access_log(mode) == "requests":
        logger.addFilter(PollRouteFilter())
