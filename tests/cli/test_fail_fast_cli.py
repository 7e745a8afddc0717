"""Bad input is refused before vLLM or torch is imported (issue 37: a typo in `--scheduler` or a bad
`report` path took ~11 s to be refused, the time importing vLLM takes). Each case runs in a fresh
interpreter, which then reports what it imported."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

CHECK = """
import json, sys
from typer.testing import CliRunner
from flatshare.cli import app
result = CliRunner().invoke(app, json.loads(sys.argv[1]))
heavy = sorted(m for m in ("vllm", "torch") if m in sys.modules)
print(json.dumps({"code": result.exit_code, "output": result.output, "heavy": heavy}))
"""

TYPO = ["--scheduler", "make-rooom"]


def _cases(tmp: Path) -> dict[str, list[str]]:
    requests = tmp / "requests.jsonl"
    requests.write_text(
        json.dumps({"id": "a", "arrival_s": 0, "prompt_tokens": 100, "max_tokens": 4, "priority": 0}) + "\n"
    )
    return {
        "sim": ["sim", "--requests", str(requests), "--out", str(tmp / "sim"), *TYPO],
        "replay": ["replay", "--workload", "voice-agents:callers=1", "--sim", "--out", str(tmp / "r"), *TYPO],
        "serve-sim": ["serve-sim", "--port", "1", *TYPO],
        "report": ["report", str(tmp / "no-such-experiment")],
    }


@pytest.mark.parametrize("case", ["sim", "replay", "serve-sim", "report"])
def test_bad_input_is_refused_before_vllm_is_imported(tmp_path: Path, case: str) -> None:
    args = _cases(tmp_path)[case]
    done = subprocess.run(
        [sys.executable, "-c", CHECK, json.dumps(args)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.splitlines()[-1])
    assert result["code"] == 2, result["output"]
    assert result["output"].startswith("error: ") and len(result["output"].strip().splitlines()) == 1
    assert result["heavy"] == [], result
