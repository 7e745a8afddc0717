"""Running the gateway under uvicorn: `gateway_main` is what `flatshare gateway` calls.

Shutdown (Ctrl-C / SIGTERM): uvicorn stops accepting connections, lets in-flight requests and streams
finish for up to `drain_timeout_s`, then the app's lifespan stops the pollers and closes the audit log.
"""

from __future__ import annotations

import logging
import math
import socket

import uvicorn

from flatshare.errors import InputError
from flatshare.gateway.app import build_gateway, startup_notes
from flatshare.gateway.config import GatewayConfig
from flatshare.gateway.connections import server_options


def gateway_main(config: GatewayConfig, log_level: str = "info") -> None:
    """Serve the gateway on `config.host:config.port` until interrupted. Everything that can fail on the
    operator's settings (the audit log, the listening socket) is done before serving: InputError then."""
    gateway = build_gateway(config)  # opens the audit log
    sock = listen(config.host, config.port)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # it logs every poll at INFO
    for note in startup_notes(config):
        print(note, flush=True)
    print(f"gateway: listening on http://{config.host}:{config.port}", flush=True)
    settings = uvicorn.Config(
        gateway.app,
        log_level=log_level,
        access_log=False,
        timeout_graceful_shutdown=max(1, math.ceil(config.drain_timeout_s)),
        **server_options(config.clients),
    )
    try:
        uvicorn.Server(settings).run(sockets=[sock])
    finally:
        sock.close()


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
