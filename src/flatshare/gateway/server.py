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


def gateway_main(config: GatewayConfig, log_level: str = "info") -> None:
    """Serve the gateway on `config.host:config.port` until interrupted."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # it logs every poll at INFO
    for note in startup_notes(config):
        print(note, flush=True)
    gateway = build_gateway(config)
    print(f"gateway: listening on http://{config.host}:{config.port}", flush=True)
    uvicorn.run(
        gateway.app,
        host=config.host,
        port=config.port,
        log_level=log_level,
        access_log=False,
        timeout_graceful_shutdown=max(1, math.ceil(config.drain_timeout_s)),
    )
