"""`flatshare serve-sim` as a user starts it: a real process on loopback, stopped by its pid."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time

import httpx
import pytest


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.mark.vllm
def test_serve_sim_command_serves_and_stops() -> None:
    port = _free_port()
    cmd = [sys.executable, "-m", "flatshare.cli", "serve-sim", "--port", str(port), "--kv-tokens", "8192"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90
        while True:
            assert proc.poll() is None, proc.stdout.read().decode() if proc.stdout else ""
            try:
                if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "serve-sim did not become healthy in 90 s"
            time.sleep(0.5)
        body = {"model": "sim", "prompt": [5, 6, 7, 8], "max_tokens": 4}
        reply = httpx.post(f"{url}/v1/completions", json=body, timeout=30).json()
        assert reply["usage"]["completion_tokens"] == 4
        assert "vllm:num_requests_running" in httpx.get(f"{url}/metrics", timeout=5).text
    finally:
        os.kill(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)


def test_serve_sim_rejects_bad_speed() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "flatshare.cli", "serve-sim", "--speed", "0.5"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert "--speed must be >= 1" in result.stderr
