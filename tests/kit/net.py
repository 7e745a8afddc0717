"""Servers on loopback for tests: free ports, an app served in a thread, waiting until things are up."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from typing import IO, Any

import httpx
import uvicorn

from flatshare.testing.vllm_server import free_port as free_port


class ThreadServer:
    """Serve an ASGI app on 127.0.0.1 in a daemon thread (uvicorn, lifespan on), on a socket bound
    before the thread starts (no window for another process to take the port). A context manager;
    `stop()` may also be called earlier (it waits at most `graceful_s + 5` s on open streams). `options`:
    more `uvicorn.Config` settings (a gateway's `server_options`)."""

    def __init__(
        self,
        app: Any,
        graceful_s: int = 2,
        keep_alive_s: int = 5,
        log_level: str = "warning",
        startup_timeout_s: float = 30.0,
        options: dict[str, Any] | None = None,
    ) -> None:
        self.socket = socket.socket()
        self.socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.socket.bind(("127.0.0.1", 0))
        self.port = int(self.socket.getsockname()[1])
        self.url = f"http://127.0.0.1:{self.port}"
        self.graceful_s = graceful_s
        self.startup_timeout_s = startup_timeout_s
        config = uvicorn.Config(
            app,
            log_level=log_level,
            lifespan="on",
            timeout_graceful_shutdown=graceful_s,
            **({"timeout_keep_alive": keep_alive_s} | (options or {})),
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.socket]}, daemon=True)

    def __enter__(self) -> ThreadServer:
        self.thread.start()
        wait_for(
            lambda: self.server.started or not self.thread.is_alive(),
            self.startup_timeout_s,
            f"the server on {self.url} to start",
            interval_s=0.01,
        )
        if not self.server.started:
            self.stop()
            raise AssertionError(f"the server on {self.url} did not start")
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        self.server.should_exit = True
        if self.thread.is_alive():
            self.thread.join(self.graceful_s + 5.0)
        self.socket.close()


def wait_for(
    predicate: Callable[[], Any],
    timeout_s: float = 5.0,
    what: str | Callable[[], str] = "condition",
    interval_s: float = 0.02,
) -> None:
    """Poll `predicate` until true; AssertionError after `timeout_s`, naming `what` (a string, or a
    function called on failure)."""
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out waiting for {what() if callable(what) else what}")
        time.sleep(interval_s)


def healthy(url: str) -> bool:
    """Whether `GET {url}/health` answers 200 now."""
    try:
        return httpx.get(f"{url}/health", timeout=1).status_code == 200
    except httpx.TransportError:
        return False


def wait_healthy(
    url: str,
    timeout_s: float = 120.0,
    exited: Callable[[], str | None] = lambda: None,
    interval_s: float = 0.3,
) -> None:
    """Until `GET {url}/health` answers 200. `exited` says why the server can no longer come up (its
    process ended: its output), or None while it may; either way the wait ends in AssertionError."""
    deadline = time.monotonic() + timeout_s
    while not healthy(url):
        gone = exited()
        if gone is not None:
            raise AssertionError(f"{url} exited before it was healthy: {gone}")
        if time.monotonic() >= deadline:
            raise AssertionError(f"{url} did not become healthy within {timeout_s:.0f} s")
        time.sleep(interval_s)


def process_exit(process: subprocess.Popen[Any], log: IO[bytes] | None = None) -> Callable[[], str | None]:
    """For `wait_healthy`: None while `process` runs, then the tail of its `log` (a file) or its stdout."""

    def exited() -> str | None:
        if process.poll() is None:
            return None
        if log is not None:
            log.seek(0)
            text = log.read()
        else:
            text = process.stdout.read() if process.stdout else b""
        return (text.decode(errors="replace") if isinstance(text, bytes) else str(text))[-2000:]

    return exited


def stop_process(process: subprocess.Popen[Any], timeout_s: float = 20.0) -> None:
    """SIGTERM by pid (SIGKILL if it outlives `timeout_s`), and reap it."""
    if process.poll() is None:
        os.kill(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.kill(process.pid, signal.SIGKILL)
        process.wait(timeout=10)


@dataclass
class SimProcess:
    """One `flatshare serve-sim` process, its base URL and its stderr log."""

    process: subprocess.Popen[bytes]
    url: str
    log: Any

    @property
    def pid(self) -> int:
        return self.process.pid


@contextmanager
def serve_sim_processes(
    count: int, *args: str, timeout_s: float = 120.0, each: Callable[[int], Sequence[str]] | None = None
) -> Iterator[list[SimProcess]]:
    """`count` `flatshare serve-sim` processes on free loopback ports, started together and waited for
    until healthy; stopped (SIGTERM, by pid) at the end. `each(i)`: more arguments for the i-th."""
    procs: list[SimProcess] = []
    with ExitStack() as logs:
        try:
            for i in range(count):
                port = free_port()
                more = list(each(i)) if each is not None else []
                cmd = [sys.executable, "-m", "flatshare.cli", "serve-sim", "--port", str(port), *args, *more]
                log = logs.enter_context(tempfile.TemporaryFile())
                proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=log)
                procs.append(SimProcess(proc, f"http://127.0.0.1:{port}", log))
            for sim in procs:
                wait_healthy(sim.url, timeout_s, process_exit(sim.process, sim.log))
            yield procs
        finally:
            for sim in procs:
                stop_process(sim.process)
