"""`flatshare report` on malformed experiment folders (issue 32, item 9): a one-line error and exit 2, never
a traceback and nothing written; and never a write through a symlink planted as `report.md` or
`summary.json`. The folders are hand-made: two conditions of ten voice turns, records written by the record
writer."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from flatshare.cli import app
from kit.files import FACTS, SAMPLE, plant, refused, untouched
from kit.files import save_colocation_run as _save

runner = CliRunner()


@pytest.fixture
def experiment(tmp_path: Path) -> Path:
    root = tmp_path / "exp"
    _save(root, "alone", 0.3)
    _save(root, "vllm-priority", 4.0)
    return root


def _report_refused(root: Path, *words: str) -> str:
    message = refused(runner.invoke(app, ["report", str(root)]), *words)
    assert not (root / "summary.json").exists() and not (root / "report.md").exists()
    return message


def test_a_good_folder_reports(experiment: Path) -> None:
    result = runner.invoke(app, ["report", str(experiment)])
    assert result.exit_code == 0, result.output
    assert "| alone |" in (experiment / "report.md").read_text()


def test_an_empty_runs_folder(tmp_path: Path) -> None:
    (tmp_path / "runs").mkdir()
    _report_refused(tmp_path, "no saved runs")


def test_no_alone_condition_builds_a_report_without_a_target(experiment: Path) -> None:
    import shutil

    shutil.rmtree(experiment / "runs" / "alone")
    result = runner.invoke(app, ["report", str(experiment)])
    assert result.exit_code == 0, result.output
    summary = json.loads((experiment / "summary.json").read_text())
    assert summary["target_s"] is None
    assert all(m["voice_over_target_frac"] is None for m in summary["conditions"].values())


def test_an_experiment_of_one_gateway_side_baseline_reports_with_its_kv_figure(tmp_path: Path) -> None:
    _save(tmp_path, "leaseholder", 0.5)  # neither vllm-priority nor make-room-t48 (the figure's usual pair)
    result = runner.invoke(app, ["report", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert "![KV use](kv.png)" in (tmp_path / "report.md").read_text()
    assert (tmp_path / "kv.png").stat().st_size > 0


def test_a_callers_folder_that_is_not_a_number(experiment: Path) -> None:
    _save(experiment, "alone", 0.3, callers="cfoo")
    _report_refused(experiment, "cfoo")


ENGINE_JSON = {
    "a list": "[1, 2]",
    "not JSON": "{nope",
    "no preemptions": json.dumps({"duration_s": 100.0, "scheduler_counters": {}}),
    "deep": "[" * 100_000 + "]" * 100_000,
    "a string duration": json.dumps(FACTS | {"duration_s": "long"}),
    "a list of counters": json.dumps(FACTS | {"scheduler_counters": [1]}),
    "a step ledger of text": json.dumps(FACTS | {"step_ledger": {"busy_s": "long"}}),
}


@pytest.mark.parametrize("case", ENGINE_JSON)
def test_a_malformed_engine_json(experiment: Path, case: str) -> None:
    (experiment / "runs" / "alone" / "c2" / "s0" / "engine.json").write_text(ENGINE_JSON[case])
    _report_refused(experiment, "engine.json")


SAMPLES = {
    "missing": None,
    "not JSON": "{nope\n",
    "a string kv_usage": json.dumps(SAMPLE | {"t": 0.0, "kv_usage": "x"}) + "\n",
    "no t": json.dumps(SAMPLE) + "\n",
    "a list": "[1]\n",
}


@pytest.mark.parametrize("case", SAMPLES)
def test_a_missing_or_mistyped_samples_file(experiment: Path, case: str) -> None:
    path = experiment / "runs" / "vllm-priority" / "c2" / "s0" / "samples.jsonl"
    if SAMPLES[case] is None:
        path.unlink()
    else:
        path.write_text(SAMPLES[case] or "")
    _report_refused(experiment, "samples.jsonl")


@pytest.mark.parametrize(
    "field, value", [("first_sentence_tokens", -100), ("end_s", 1e300), ("send_s", -1e12)]
)
def test_a_record_out_of_range(experiment: Path, field: str, value: float) -> None:
    path = experiment / "runs" / "alone" / "c2" / "s0" / "requests.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    rows[3][field] = value
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    _report_refused(experiment, "requests.jsonl:4", field)


def test_an_experiment_marker_that_is_not_json(experiment: Path) -> None:
    (experiment / "experiment.json").write_text("{nope")
    _report_refused(experiment, "experiment.json")


@pytest.mark.parametrize("name", ["report.md", "summary.json", "tail.png"])
def test_a_planted_symlink_is_replaced_not_written_through(
    experiment: Path, tmp_path: Path, name: str
) -> None:
    victim = tmp_path / "outside" / "victim.txt"
    link = plant(experiment / name, victim)
    result = runner.invoke(app, ["report", str(experiment)])
    assert result.exit_code == 0, result.output
    untouched(victim, link)
    assert link.stat().st_size > 0
