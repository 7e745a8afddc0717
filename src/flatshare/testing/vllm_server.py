"""A real vLLM OpenAI server on the CPU, started as a subprocess for tests and demos.

    config = VllmServerConfig(model=make_tiny_model(tmp), scheduling_policy="priority")
    with VllmServer(config) as server:
        httpx.post(f"{server.url}/v1/completions", json={"model": "tiny", "prompt": [1, 2, 3]})

The server runs in its own process group (with its EngineCore and worker children) but in the caller's
session; `stop()` sends SIGTERM to that group only, waits, then SIGKILL. Not a new session: where Linux's
autogroup scheduling is on (`/proc/sys/kernel/sched_autogroup_enabled`), a new session is a new CPU group
that shares the machine with the caller's group as an equal, so `engine_niceness` would order vLLM's
processes only among themselves. Seen on two cores (kernel 6.18): a client thread needing 30 ms of CPU
waited 24-30 s in the run queue, the whole length of a decode, holding the GIL, so every thread of the
client stopped (streams unread, `ssl.create_default_context()` 24 s). In the caller's session it took 30 ms.

Output goes to a log file whose tail is quoted in every `VllmServerError`. With the tiny model it is
healthy after about 25-30 s and holds about 1.5 GB of memory (three Python processes that import torch).

vLLM 0.32 on the CPU backend: the attention kernel needs `block_size` a multiple of 32, and the
engine refuses to start unless one request of `max_model_len` fits in the KV cache, that is
`max_model_len <= (num_gpu_blocks - 1) * block_size` (one block is held back as the null block).
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import IO, Any, Literal, Protocol

import psutil

CPU_BLOCK_MULTIPLE = 32
SERVER_ENV = {
    "VLLM_CPU_KVCACHE_SPACE": "1",
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "VLLM_LOGGING_LEVEL": "WARNING",
    "VLLM_NO_USAGE_STATS": "1",
    "DO_NOT_TRACK": "1",
    "TOKENIZERS_PARALLELISM": "false",
    "PYTHONUNBUFFERED": "1",
}


class VllmServerError(RuntimeError):
    """The server died, never became healthy, or was configured so that it cannot start."""


@dataclass(frozen=True)
class VllmServerConfig:
    """Flags for one vLLM server. `extra_args` are appended to the command line as given."""

    model: Path
    max_model_len: int = 1024
    num_gpu_blocks: int = 64
    block_size: int = 32
    max_num_batched_tokens: int = 1024
    max_num_seqs: int = 8
    scheduling_policy: Literal["fcfs", "priority"] = "fcfs"
    scheduler_cls: str | None = None
    additional_config: Mapping[str, Any] | None = None
    served_model_name: str = "tiny"
    extra_args: tuple[str, ...] = ()
    extra_env: Mapping[str, str] = field(default_factory=dict)
    startup_timeout_s: float = 240.0
    host: str = "127.0.0.1"
    # Added to the niceness of vLLM's engine-core and worker processes once the server is healthy (0:
    # left alone). On a machine with fewer cores than vLLM's busy processes (the engine core polls, the
    # worker's OpenMP threads spin), the API server and the client otherwise get what is left: seen on two
    # cores, the API server at 0.1 of a core and streams silent for 11 s while the engine decoded. It orders
    # vLLM's processes against the caller's because the server stays in the caller's session (see above).
    engine_niceness: int = 0
    label: str = "vLLM server"  # what errors call it

    def __post_init__(self) -> None:
        for name in ("max_model_len", "num_gpu_blocks", "block_size", "max_num_batched_tokens"):
            if getattr(self, name) <= 0:
                raise VllmServerError(f"{name} must be positive, got {getattr(self, name)}")
        if not 0 <= self.engine_niceness <= 19:
            raise VllmServerError(f"engine_niceness must be in 0..19, got {self.engine_niceness}")
        if self.max_num_seqs <= 0 or self.startup_timeout_s <= 0:
            raise VllmServerError("max_num_seqs and startup_timeout_s must be positive")
        if self.scheduling_policy not in ("fcfs", "priority"):
            raise VllmServerError(
                f"scheduling_policy must be fcfs or priority, got {self.scheduling_policy!r}"
            )
        if self.block_size % CPU_BLOCK_MULTIPLE:
            raise VllmServerError(
                f"block_size must be a multiple of 32 on the CPU backend, got {self.block_size}"
            )
        if self.max_model_len > self.usable_kv_tokens:
            raise VllmServerError(
                f"max_model_len {self.max_model_len} exceeds the KV cache: vLLM needs "
                f"max_model_len <= (num_gpu_blocks - 1) * block_size = {self.usable_kv_tokens}"
            )

    @property
    def usable_kv_tokens(self) -> int:
        return (self.num_gpu_blocks - 1) * self.block_size

    def command(self, port: int) -> list[str]:
        args = [
            sys.executable, "-m", "vllm.entrypoints.openai.api_server",
            "--model", str(self.model),
            "--served-model-name", self.served_model_name,
            "--host", self.host,
            "--port", str(port),
            "--enforce-eager",
            "--max-model-len", str(self.max_model_len),
            "--num-gpu-blocks-override", str(self.num_gpu_blocks),
            "--block-size", str(self.block_size),
            "--max-num-batched-tokens", str(self.max_num_batched_tokens),
            "--max-num-seqs", str(self.max_num_seqs),
            "--scheduling-policy", self.scheduling_policy,
        ]  # fmt: skip
        if self.scheduler_cls:
            args += ["--scheduler-cls", self.scheduler_cls]
        if self.additional_config:
            args += ["--additional-config", json.dumps(dict(self.additional_config))]
        return args + list(self.extra_args)

    def environment(self) -> dict[str, str]:
        return {**os.environ, **SERVER_ENV, **self.extra_env}


class ServerSpec(Protocol):
    """What `VllmServer` needs of a configuration: `VllmServerConfig` (tests), or another command line
    (`flatshare.colocation.servers.ServeSpec`, the co-location experiment's real engines; or another server
    with a `/health` route, `flatshare.colocation.gateways.GatewaySpec`). `label` names it in errors and
    its log file (`<first word, lower case>-<port>.log`)."""

    @property
    def label(self) -> str: ...

    @property
    def host(self) -> str: ...

    @property
    def startup_timeout_s(self) -> float: ...

    @property
    def engine_niceness(self) -> int: ...

    def command(self, port: int) -> list[str]: ...

    def environment(self) -> dict[str, str]: ...


class VllmServer:
    """One running vLLM server process (and its process group), or any server a `ServerSpec` describes.
    Use as a context manager."""

    def __init__(self, config: ServerSpec, log_dir: Path | None = None) -> None:
        self.config = config
        self.port = free_port(config.host)
        self.url = f"http://{config.host}:{self.port}"
        directory = log_dir if log_dir is not None else Path(tempfile.mkdtemp(prefix="flatshare-vllm-"))
        self.log_path = directory / f"{config.label.split()[0].lower()}-{self.port}.log"
        self.startup_s: float | None = None
        self._process: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None
        self._stopped = False

    @property
    def pid(self) -> int:
        if self._process is None:
            raise VllmServerError("server not started")
        return self._process.pid

    def start(self) -> VllmServer:
        if self._process is not None:
            raise VllmServerError("server already started (a VllmServer starts once)")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = self.log_path.open("wb")
        began = time.monotonic()
        try:
            self._process = subprocess.Popen(
                self.config.command(self.port),
                stdin=subprocess.DEVNULL,
                stdout=self._log,
                stderr=subprocess.STDOUT,
                env=self.config.environment(),
                process_group=0,  # its own group, the caller's session (and autogroup): module docstring
            )
            atexit.register(self.stop)
            self._wait_healthy(began + self.config.startup_timeout_s)
            if self.config.engine_niceness:
                self._renice_engine(self.config.engine_niceness)
        except BaseException:
            self.stop()
            raise
        self.startup_s = time.monotonic() - began
        return self

    def _wait_healthy(self, deadline: float) -> None:
        assert self._process is not None
        while time.monotonic() < deadline:
            code = self._process.poll()
            if code is not None:
                raise VllmServerError(
                    f"{self.config.label} exited with code {code} while starting\n{self.log_tail()}"
                )
            if self.healthy():
                return
            time.sleep(0.5)
        raise VllmServerError(
            f"{self.config.label} not healthy after {self.config.startup_timeout_s:.0f} s\n{self.log_tail()}"
        )

    def _renice_engine(self, increment: int) -> None:
        """Raise the niceness of every process the API server started (engine core, workers)."""
        for child in psutil.Process(self.pid).children(recursive=True):
            with contextlib.suppress(psutil.NoSuchProcess):
                child.nice(child.nice() + increment)

    def healthy(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/health", timeout=2.0) as response:
                return bool(response.status == 200)
        except (OSError, urllib.error.URLError):
            return False

    def running(self) -> bool:
        return self._process is not None and not self._stopped and self._process.poll() is None

    def stop(self, timeout_s: float = 30.0) -> None:
        """SIGTERM the server's process group, wait up to `timeout_s`, then SIGKILL what is left.

        Idempotent. `pid` stays readable afterwards (it names the group, now gone)."""
        atexit.unregister(self.stop)
        process = self._process
        if process is not None and not self._stopped:
            self._stopped = True
            _signal_group(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                _signal_group(process.pid, signal.SIGKILL)
                process.wait(timeout=10.0)
            if not _wait_group_gone(process.pid, timeout_s=5.0):
                _signal_group(process.pid, signal.SIGKILL)  # children that outlived the leader
        if self._log is not None:
            self._log.close()
            self._log = None

    def log_tail(self, lines: int = 60) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return f"(no log at {self.log_path})"
        tail = "\n".join(text.splitlines()[-lines:])
        return f"--- last {lines} lines of {self.log_path} ---\n{tail}"

    def __enter__(self) -> VllmServer:
        return self.start()

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        """Stop the server. An error raised inside the block gets a note with the server's state and its
        log tail: a failed request alone cannot say whether the engine died or the client gave up."""
        if isinstance(error, Exception) and self._process is not None:
            code = self._process.poll()
            state = "still running" if code is None else f"had exited with code {code}"
            error.add_note(f"{self.config.label} {self.url} {state} when this was raised\n{self.log_tail()}")
        self.stop()


def start_vllm_server(config: ServerSpec, log_dir: Path | None = None) -> VllmServer:
    """Start a server and wait until `/health` answers 200; the caller must `stop()` it."""
    return VllmServer(config, log_dir).start()


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def _wait_group_gone(pgid: int, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return True
        except PermissionError:
            return False
        time.sleep(0.1)
    return False


def _signal_group(pgid: int, signum: signal.Signals) -> None:
    """Signal the process group this module created (its id is the server's pid)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signum)
