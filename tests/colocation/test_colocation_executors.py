"""The co-location command through either executor: a local Ray instance gives the same summary.json as
local processes for the same seeds, and a failed run is named (condition and seed) while the others are
saved and the command exits non-zero."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from flatshare.cli import app

pytestmark = pytest.mark.vllm

SMALL = ["--callers", "2", "--seeds", "1", "--agents", "4", "--duration", "60"]
CONDITIONS = ["--conditions", "alone,vllm-priority,make-room-t48"]


@pytest.fixture
def local_ray() -> Iterator[Any]:
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        yield ray
    finally:
        ray.shutdown()


@pytest.mark.timeout(600)
def test_ray_and_local_executors_write_the_same_summary(tmp_path: Path, local_ray: Any) -> None:
    runner = CliRunner()
    for name, extra in (("local", ["--workers", "1"]), ("ray", ["--executor", "ray"])):
        out = tmp_path / name
        result = runner.invoke(
            app, ["experiment", "colocation", *SMALL, *CONDITIONS, *extra, "--out", str(out)]
        )
        assert result.exit_code == 0, result.output
    assert (tmp_path / "ray" / "summary.json").read_bytes() == (
        tmp_path / "local" / "summary.json"
    ).read_bytes()
    for run in sorted((tmp_path / "local" / "runs").rglob("*.json*")):
        twin = tmp_path / "ray" / run.relative_to(tmp_path / "local")
        assert twin.read_bytes() == run.read_bytes(), run


def test_a_failed_run_is_named_and_the_others_are_saved(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from flatshare.colocation import experiment

    def run_one(out: Path, condition: experiment.Condition, callers: int, seed: int, plan: object) -> str:
        if condition.key == "vllm-priority":
            raise RuntimeError("engine fell over")
        folder = experiment.run_dir(out, condition.key, callers, seed)
        folder.mkdir(parents=True)
        return str(folder)

    monkeypatch.setattr(experiment, "run_one", run_one)
    args = ["experiment", "colocation", *SMALL, *CONDITIONS, "--workers", "1", "--out", str(tmp_path)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 1
    assert "failed: vllm-priority/c2 seed 0: RuntimeError: engine fell over" in result.output
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == ["alone", "make-room-t48"]
    assert not (tmp_path / "runs" / "vllm-priority" / "c2" / "s0").exists()
    assert not (tmp_path / "summary.json").exists()
