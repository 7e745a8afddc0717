"""Resuming an interrupted co-location experiment: the saved runs of the same plan are kept, the rest run,
the result is the uninterrupted run's, and a run of another plan is refused."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from flatshare.cli import app
from flatshare.colocation.experiment import ColocationPlan, pending_jobs, pick_conditions, run_plan
from flatshare.colocation.resume import is_saved
from flatshare.errors import InputError

pytestmark = pytest.mark.vllm

ARGS = ["--callers", "1", "--agents", "2", "--seeds", "2", "--duration", "40", "--drain", "20"]
CONDITIONS = "alone,vllm-priority"


def _plan(**changes: object) -> ColocationPlan:
    base: dict[str, object] = dict(
        callers=(1,), agents=2, seeds=2, duration_s=40.0, drain_s=20.0, conditions=pick_conditions(CONDITIONS)
    )
    return ColocationPlan(**(base | changes), workers=1)  # type: ignore[arg-type]


def _run(out: Path, *extra: str) -> str:
    result = CliRunner().invoke(
        app, ["experiment", "colocation", "--out", str(out), *ARGS, "--conditions", CONDITIONS, *extra]
    )
    assert result.exit_code == 0, result.output
    return result.output


def test_an_interrupted_run_resumes_to_the_uninterrupted_result(tmp_path: Path) -> None:
    whole, cut = tmp_path / "whole", tmp_path / "cut"
    _run(whole)
    shutil.copytree(whole / "runs", cut / "runs")
    shutil.rmtree(cut / "runs" / "vllm-priority" / "c1" / "s1")  # the run the interruption lost
    kept = (cut / "runs" / "alone" / "c1" / "s0" / "requests.jsonl").stat().st_mtime_ns
    output = _run(cut, "--resume")
    assert "resuming: 3 runs already saved, 1 to run" in output
    assert (cut / "runs" / "alone" / "c1" / "s0" / "requests.jsonl").stat().st_mtime_ns == kept
    for run in ("vllm-priority/c1/s1", "alone/c1/s0"):
        for name in ("requests.jsonl", "engine.json"):
            assert (cut / "runs" / run / name).read_bytes() == (whole / "runs" / run / name).read_bytes()
    assert json.loads((cut / "summary.json").read_text()) == json.loads((whole / "summary.json").read_text())


def test_every_run_records_the_plan_facts_a_resume_checks(tmp_path: Path) -> None:
    plan = _plan()
    run_plan(tmp_path, plan)
    facts = json.loads((tmp_path / "runs" / "alone" / "c1" / "s0" / "engine.json").read_text())
    assert (facts["duration_s"], facts["drain_s"], facts["agents"]) == (40.0, 20.0, 2)
    assert is_saved(tmp_path, plan.run_facts(), "alone", 1, 0)
    assert not is_saved(tmp_path, plan.run_facts(), "alone", 1, 7)
    assert pending_jobs(tmp_path, plan, resume=True) == []
    assert len(pending_jobs(tmp_path, plan)) == 4


@pytest.mark.parametrize(
    ("changes", "fact"),
    [({"drain_s": 30.0}, "drain_s"), ({"agents": 3}, "agents"), ({"duration_s": 50.0}, "duration_s")],
)
def test_a_run_saved_by_another_plan_is_refused_by_name(
    tmp_path: Path, changes: dict[str, object], fact: str
) -> None:
    run_plan(tmp_path, _plan(conditions=pick_conditions("alone"), seeds=1))
    with pytest.raises(InputError, match=rf"alone/c1/s0: saved by another plan \({fact} "):
        pending_jobs(tmp_path, _plan(**changes), resume=True)


def test_the_cli_refuses_to_resume_into_another_plans_runs_before_running(tmp_path: Path) -> None:
    _run(tmp_path)
    before = sorted(p.stat().st_mtime_ns for p in tmp_path.glob("runs/**/requests.jsonl"))
    args = ["experiment", "colocation", "--out", str(tmp_path), *ARGS[:-1], "30", "--conditions", CONDITIONS]
    result = CliRunner().invoke(app, [*args, "--resume"])
    assert result.exit_code != 0
    assert "saved by another plan (drain_s 20.0, this plan's 30.0)" in result.output
    assert sorted(p.stat().st_mtime_ns for p in tmp_path.glob("runs/**/requests.jsonl")) == before


def test_a_run_saved_before_plans_were_recorded_cannot_be_resumed_into(tmp_path: Path) -> None:
    plan = _plan(conditions=pick_conditions("alone"), seeds=1)
    run_plan(tmp_path, plan)
    path = tmp_path / "runs" / "alone" / "c1" / "s0" / "engine.json"
    facts = json.loads(path.read_text())
    del facts["drain_s"]
    path.write_text(json.dumps(facts))
    with pytest.raises(InputError, match="saved without `drain_s`"):
        is_saved(tmp_path, plan.run_facts(), "alone", 1, 0)
