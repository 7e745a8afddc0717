"""`flatshare serve-sim` as a user starts it: a real process on loopback, stopped by its pid."""

from __future__ import annotations

import socket
import subprocess
import sys

import httpx
import pytest

from kit.net import free_port, process_exit, stop_process, wait_healthy


@pytest.mark.vllm
def test_serve_sim_command_serves_and_stops() -> None:
    """Its access log has the completion but not the poll routes a gateway hits several times a second
    (issue 37: ~20 lines a second when started with `&`)."""
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
        assert httpx.get(f"{url}/v1/models", timeout=5).status_code == 200
    finally:
        stop_process(proc, timeout_s=30)
    assert proc.stdout is not None
    log = proc.stdout.read().decode()
    assert '"POST /v1/completions HTTP/1.1" 200' in log, log
    assert not [line for line in log.splitlines() if any(r in line for r in ("GET /health", "GET /metrics"))]
    assert "GET /v1/models" not in log


def test_a_port_in_use_is_one_line_and_exit_2() -> None:
    """Refused before the engine is built (issue 37: a raw uvicorn traceback after vLLM's import)."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = subprocess.run(
            [sys.executable, "-m", "flatshare.cli", "serve-sim", "--port", str(port)],
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert result.returncode == 2, result.stderr
    assert result.stderr.splitlines() == [f"error: cannot listen on 127.0.0.1:{port}: Address already in use"]


def test_serve_sim_rejects_bad_speed() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "flatshare.cli", "serve-sim", "--speed", "0.5"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert "--speed must be >= 1" in result.stderr
