"""`flatshare report` on a malformed admission experiment (issue 32, item 9): one line, exit 2, nothing
written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from flatshare.cli import app
from kit.files import refused

FACTS = {"workload": "w", "condition": {"key": "c", "routing_policy": "threshold"}, "seed": 0, "part": "synthetic",
         "preemptions": 0, "replay_s": 10.0, "eval_from_s": 0.0, "engines": 2, "long_input_tokens": 100,
         "thresholds": None, "engine_config": None, "profile": None}  # fmt: skip


@pytest.mark.parametrize(
    "facts, words",
    [
        ([1, 2], "must hold a JSON object"),
        ({k: v for k, v in FACTS.items() if k != "part"}, "part"),
        (FACTS | {"condition": ["c"]}, "condition"),
        (FACTS | {"condition": {"key": "c"}}, "routing_policy"),
        (FACTS | {"seed": "0"}, "seed"),
        (FACTS | {"engine_config": [1]}, "engine_config"),
    ],
)
def test_malformed_run_facts_are_one_line_errors(tmp_path: Path, facts: object, words: str) -> None:
    (tmp_path / "experiment.json").write_text(json.dumps({"kind": "admission", "plan": {}}))
    run = tmp_path / "runs" / "w" / "c" / "s0"
    run.mkdir(parents=True)
    (run / "run.json").write_text(json.dumps(facts))
    for name in ("requests.jsonl", "samples.jsonl", "occupancy.jsonl", "decisions.jsonl"):
        (run / name).write_text("")
    refused(CliRunner().invoke(app, ["report", str(tmp_path)]), "run.json", words)
    assert not (tmp_path / "summary.json").exists()
