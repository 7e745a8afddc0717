"""benchmarks/gpu_step_costs.py on the CPU (`--smoke`: tiny shapes, no CUDA graphs): it runs, and what it
writes is read by `flatshare.sim.gpu_steps` (the reader of the committed H200 measurement)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from flatshare.errors import InputError
from flatshare.sim.gpu_steps import read_steps

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "gpu_step_costs.py"


def test_smoke_run_writes_a_measurement_the_reader_takes(tmp_path: Path) -> None:
    out = tmp_path / "smoke.json"
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--smoke", "--replays", "2", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    m = read_steps(out)
    assert m.info["device"] == "cpu" and m.layers == 2
    assert [n for n, _ in m.linear] == [1, 8, 64]
    assert all(s > 0 for _, s in m.linear)
    assert m.decode and m.prefill and len(m.steps) == 2
    assert m.steps[0].chunk == 16 and m.steps[0].voice == 1
    kernels = json.loads(out.read_text())["steps"][0]["kernels"]
    assert set(kernels) == {"decode", "voice", "prefill-self", "prefill-context"}


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA device is present")
def test_without_a_gpu_it_says_so(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--out", str(tmp_path / "x.json")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 2 and "no CUDA device" in done.stderr


def test_a_file_that_is_not_a_measurement_is_refused(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"info": {}, "linear": [{"tokens": 1}]}))
    with pytest.raises(InputError, match="not a gpu_step_costs measurement"):
        read_steps(bad)
    with pytest.raises(InputError, match="not found"):
        read_steps(tmp_path / "missing.json")


def test_replays_below_one_are_refused(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--smoke", "--replays", "0", "--out", str(tmp_path / "x.json")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 2 and "--replays must be at least 1" in done.stderr
    assert not (tmp_path / "x.json").exists()
