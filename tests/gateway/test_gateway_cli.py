"""`gateway` as an operator runs it: a process that says how it runs, refuses bad settings, and drains
in-flight streams when stopped."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from kit.fake_vllm import FakeState, fake_backend_app
from kit.net import ThreadServer, free_port, process_exit, wait_healthy

GATEWAY = [sys.executable, "-m", "flatshare.gateway", "gateway"]


@pytest.fixture
def backend() -> Iterator[tuple[FakeState, str]]:
    state = FakeState(tokens=30, token_delay_s=0.05)
    with ThreadServer(fake_backend_app(state), log_level="critical") as server:
        yield state, server.url


def test_bad_settings_exit_2_with_one_line(tmp_path: Path) -> None:
    config = tmp_path / "gw.toml"
    config.write_text('[[backends]]\nurl = "http://127.0.0.1:1"\n[poll]\ninterval_s = -1\n')
    result = subprocess.run([*GATEWAY, "--config", str(config)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert result.stderr.strip() == f"error: {config}: poll.interval_s must be > 0, got -1.0"
    no_backend = subprocess.run([*GATEWAY, "--port", "0"], capture_output=True, text=True, timeout=60)
    assert no_backend.returncode == 2 and "give at least one backend" in no_backend.stderr


def wait_listening(url: str, proc: subprocess.Popen[str]) -> None:
    wait_healthy(url, 30, process_exit(proc), interval_s=0.1)


def test_sigterm_drains_in_flight_streams(backend: tuple[FakeState, str], tmp_path: Path) -> None:
    state, backend_url = backend
    port = free_port()
    audit = tmp_path / "audit.jsonl"
    cmd = [*GATEWAY, "--backend", f"gpu0={backend_url}", "--port", str(port), "--audit-log", str(audit)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_listening(url, proc)
        body = {"prompt": "hi", "stream": True}
        with httpx.stream("POST", f"{url}/v1/completions", json=body, timeout=30) as response:
            lines = response.iter_lines()
            first = next(line for line in lines if line.startswith("data: "))
            os.kill(proc.pid, signal.SIGTERM)
            time.sleep(0.3)
            with pytest.raises(httpx.ConnectError):
                httpx.get(f"{url}/health", timeout=2)  # no new connections while draining
            rest = [line.removeprefix("data: ") for line in lines if line.startswith("data: ")]
        assert proc.wait(timeout=20) in (0, -signal.SIGTERM)  # uvicorn re-raises the signal once drained
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
    output = proc.stdout.read() if proc.stdout else ""
    tokens = [first.removeprefix("data: "), *rest[:-1]]
    assert [json.loads(t)["choices"][0]["text"] for t in tokens] == [f" t{i}" for i in range(30)]
    assert rest[-1] == "[DONE]" and state.finished == 1
    assert "WARNING running open" in output and "policy threshold" in output
    assert json.loads(audit.read_text().splitlines()[0])["backend"] == "gpu0"  # flushed at shutdown
