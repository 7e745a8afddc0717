"""`flatshare replay` says when requests fail or /metrics cannot be sampled (issue 37: against a dead
endpoint it ran the whole workload and exited 0 with "4 failed"; through the gateway it wrote an empty
samples.jsonl, 114 sample errors, without a word). It exits 1 when more than `--max-failed` of the
requests failed (default 0)."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from flatshare.cli import app
from flatshare.replay.verdict import verdict
from flatshare.testing.vllm_server import free_port

SPEC = "long-short:long=500,shorts=3,jitter=0.2"
runner = CliRunner()


def _replay(out: Path, *more: str) -> tuple[int, str]:
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    args = ["replay", "--workload", SPEC, "--endpoint", url, "--max-model-len", "4096", "--out", str(out)]
    result = runner.invoke(app, [*args, *more])
    return result.exit_code, result.output


def test_failed_requests_make_replay_exit_1_with_one_line(tmp_path: Path) -> None:
    code, output = _replay(tmp_path)
    assert code == 1, output
    assert "4 of 4 requests failed (100.0%; --max-failed 0)" in output
    assert (tmp_path / "requests.jsonl").is_file()  # the records are written all the same


def test_max_failed_tolerates_a_share(tmp_path: Path) -> None:
    code, output = _replay(tmp_path, "--max-failed", "1")
    assert code == 0, output
    assert "4 of 4 requests failed" in output


def test_max_failed_outside_0_1_is_refused_before_running(tmp_path: Path) -> None:
    code, output = _replay(tmp_path / "out", "--max-failed", "1.5")
    assert code == 2, output
    assert not (tmp_path / "out").exists()


def test_metrics_that_cannot_be_sampled_are_reported(tmp_path: Path) -> None:
    code, output = _replay(tmp_path, "--max-failed", "1")
    assert code == 0, output
    run = json.loads((tmp_path / "run.json").read_text())
    (name,) = run["stats"]["sample_errors"]
    assert run["stats"]["sample_errors"][name] >= 1 and run["stats"]["last_sample_error"][name]
    assert f"/metrics scrapes of {name} failed (last: " in output
    assert verdict(run, 1.0).sample_lines()[0] in output
