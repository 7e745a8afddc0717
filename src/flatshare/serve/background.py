"""Running an ASGI app under uvicorn in a background thread, for tests: a free loopback port, a bounded
start, and a stop that does not wait on open streams for more than a few seconds.

    with BackgroundServer(build_sim_app(config, profile)) as server:
        httpx.get(f"{server.url}/health")
"""

from __future__ import annotations

import socket
import threading
import time
from types import TracebackType
from typing import Any

import uvicorn

from flatshare.serve.server import GRACEFUL_SHUTDOWN_S


class BackgroundServer:
    """Serve `app` on 127.0.0.1 (a port the OS picks) in a daemon thread while the context is open."""

    def __init__(self, app: Any, startup_timeout_s: float = 30.0, log_level: str = "warning") -> None:
        self._startup_timeout_s = startup_timeout_s
        config = uvicorn.Config(
            app, log_level=log_level, lifespan="on", timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S
        )
        self._server = uvicorn.Server(config)
        self._socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._socket.bind(("127.0.0.1", 0))
        self.port: int = self._socket.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [self._socket]}, name="serve-sim", daemon=True
        )

    def __enter__(self) -> BackgroundServer:
        self._thread.start()
        deadline = time.monotonic() + self._startup_timeout_s
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"server on {self.url} did not start within {self._startup_timeout_s} s")
            time.sleep(0.01)
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def stop(self, timeout_s: float = GRACEFUL_SHUTDOWN_S + 5.0) -> None:
        self._server.should_exit = True
        if self._thread.is_alive():
            self._thread.join(timeout_s)
        self._socket.close()
