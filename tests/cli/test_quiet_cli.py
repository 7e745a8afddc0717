"""Quiet by default: vLLM's and torch's log records go to OUT/engine.log, not around flatshare's output."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

HELD_THEN_WRITTEN = """
import logging, sys, warnings
from pathlib import Path
from flatshare import enginelog
enginelog.quiet()
logging.getLogger("vllm.platforms").warning("Triton is not installed.")
warnings.warn("a torch warning")
out = Path(sys.argv[1])
assert not out.exists()
enginelog.log_to(out)
logging.getLogger("vllm.v1").warning("after the folder is named")
"""


def test_engine_records_are_held_then_written_to_engine_log(tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = subprocess.run(
        [sys.executable, "-c", HELD_THEN_WRITTEN, str(out)], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    log = (out / "engine.log").read_text()
    for text in ("vllm.platforms: Triton is not installed.", "a torch warning", "after the folder is named"):
        assert text in log


def test_log_to_without_quiet_writes_nothing(tmp_path: Path) -> None:
    code = "import sys\nfrom pathlib import Path\nfrom flatshare import enginelog\nenginelog.log_to(Path(sys.argv[1]))\n"
    subprocess.run([sys.executable, "-c", code, str(tmp_path / "o")], check=True, timeout=120)
    assert not (tmp_path / "o").exists()


@pytest.mark.vllm
def test_sim_prints_only_its_own_line(tmp_path: Path) -> None:
    requests = tmp_path / "r.jsonl"
    row = {"id": "a", "arrival_s": 0, "prompt_tokens": 300, "max_tokens": 4, "priority": 0}
    requests.write_text(json.dumps(row) + "\n")
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "flatshare.cli", "sim", "--requests", str(requests), "--out", str(out)]
    result = subprocess.run([*cmd, "--cpu-tier-tokens", "4096"], capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    assert result.stdout.startswith("simulated 1 requests") and len(result.stdout.splitlines()) == 1
