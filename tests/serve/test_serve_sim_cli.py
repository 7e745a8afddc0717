"""`flatshare serve-sim` as a user starts it: a real process on loopback, stopped by its pid."""

from __future__ import annotations

import subprocess
import sys

import httpx
import pytest

from kit.net import free_port, process_exit, stop_process, wait_healthy


@pytest.mark.vllm
def test_serve_sim_command_serves_and_stops() -> None:
    port = free_port()
    cmd = [sys.executable, "-m", "flatshare.cli", "serve-sim", "--port", str(port), "--kv-tokens", "8192"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, 90, process_exit(proc), interval_s=0.5)
        body = {"model": "sim", "prompt": [5, 6, 7, 8], "max_tokens": 4}
        reply = httpx.post(f"{url}/v1/completions", json=body, timeout=30).json()
        assert reply["usage"]["completion_tokens"] == 4
        assert "vllm:num_requests_running" in httpx.get(f"{url}/metrics", timeout=5).text
    finally:
        stop_process(proc, timeout_s=30)


def test_serve_sim_rejects_bad_speed() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "flatshare.cli", "serve-sim", "--speed", "0.5"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert "--speed must be >= 1" in result.stderr
