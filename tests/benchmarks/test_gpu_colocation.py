"""benchmarks/gpu_colocation.sh --dry-run: the plan and the two GPU servers it would start, on a CPU."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "benchmarks" / "gpu_colocation.sh"


def test_the_dry_run_prints_the_plan_and_the_servers_and_starts_nothing(tmp_path: Path) -> None:
    env = {**os.environ, "FLATSHARE": f"{sys.executable} -m flatshare.cli", "OUT": str(tmp_path / "exp")}
    env["MODEL"] = "/models/llama-3.1-8b"
    done = subprocess.run(
        ["bash", str(SCRIPT), "--dry-run"], env=env, capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    plan = next(line for line in lines if line.startswith("plan:"))
    assert "2 runs" in plan and "vllm-priority, make-room-t48" in plan and "150 s" in plan
    servers = {line.split(":", 1)[0]: line for line in lines if line.startswith("server ")}
    assert set(servers) == {"server vllm-priority", "server make-room-t48"}
    for line in servers.values():
        assert "--model /models/llama-3.1-8b" in line and "--host 127.0.0.1" in line
        assert "--num-gpu-blocks-override 2816" in line  # the preset's 45,056 KV tokens in 16-token blocks
        assert "--kv-offloading-size 8.000" in line  # the 8 GiB CPU tier (65,536 tokens x 128 KiB)
        assert "--async-scheduling" in line and "--enforce-eager" not in line
        assert "--gpu-memory-utilization=0.9" in line
    assert "MakeRoomScheduler" in servers["server make-room-t48"]
    assert "MakeRoomScheduler" not in servers["server vllm-priority"]
    assert not (tmp_path / "exp").exists()
