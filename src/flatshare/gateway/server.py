"""Running the gateway under uvicorn: `gateway_main` is what `flatshare gateway` calls.

Shutdown (Ctrl-C / SIGTERM): uvicorn stops accepting connections, lets in-flight requests and streams
finish for up to `drain_timeout_s`, then the app's lifespan stops the pollers and closes the audit log.
"""

from __future__ import annotations

import logging
import math

import uvicorn

from flatshare.gateway.app import build_gateway, startup_notes
from flatshare.gateway.config import GatewayConfig
from flatshare.gateway.connections import server_options
from flatshare.serving import access_log_option, filter_access_log, listen

__all__ = ["gateway_main", "listen"]


def gateway_main(config: GatewayConfig, log_level: str = "info", access_log: str = "off") -> None:
    """Serve the gateway on `config.host:config.port` until interrupted. Everything that can fail on the
    operator's settings (the audit log, the listening socket) is done before serving: InputError then.
    `access_log`: off by default (the audit log records routing decisions), else `flatshare.serving`'s
    modes."""
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
        timeout_graceful_shutdown=max(1, math.ceil(config.drain_timeout_s)),
        **access_log_option(access_log),
        **server_options(config.clients),
    )
    filter_access_log(access_log)
    try:
        uvicorn.Server(settings).run(sockets=[sock])
    finally:
        sock.close()
