"""Calibration never writes into the package (issue 37: docs/fidelity.md's flow overwrote the tracked
`src/flatshare/sim/profiles/vllm-cpu-tiny.json`), and `fidelity --profile` reads its profile, a shipped
name or a path, before it contacts a server."""

from __future__ import annotations

import hashlib
from importlib import resources
from pathlib import Path

from typer.testing import CliRunner

from flatshare.cli import app
from flatshare.testing.vllm_server import free_port

runner = CliRunner()


def _shipped(name: str) -> Path:
    return Path(str(resources.files("flatshare.sim") / "profiles" / f"{name}.json"))


def test_calibrate_engine_refuses_to_write_a_shipped_profile() -> None:
    shipped = _shipped("vllm-cpu-tiny")
    before = hashlib.sha256(shipped.read_bytes()).hexdigest()
    dead = f"http://127.0.0.1:{free_port()}"
    for out in (shipped, shipped.with_name("mine.json")):
        result = runner.invoke(app, ["calibrate-engine", "--endpoint", dead, "--out", str(out)])
        assert result.exit_code == 2, result.output
        assert "shipped profiles" in result.output and "--profile" in result.output, result.output
        assert not shipped.with_name("mine.json").exists()
    assert hashlib.sha256(shipped.read_bytes()).hexdigest() == before


def test_fidelity_reads_its_profile_before_contacting_the_server(tmp_path: Path) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    args = [
        "fidelity",
        "--endpoint",
        dead,
        "--workload",
        "voice-agents:callers=1",
        "--out",
        str(tmp_path / "o"),
    ]
    missing = tmp_path / "calibrated.json"
    result = runner.invoke(app, [*args, "--profile", str(missing)])
    assert result.exit_code == 2, result.output
    assert f"profile {str(missing)!r}: not a file" in result.output, result.output
