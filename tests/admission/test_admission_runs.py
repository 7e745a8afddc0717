"""Saved admission runs read back: a run saved before `Condition.policy` became `routing_policy` reads the
same as one saved after."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from admissionkit import request, run_saved, workload

from flatshare.admission.measures import run_metrics
from flatshare.admission.runs import load_run
from flatshare.policy.policies import make_policy
from flatshare.policy.routing import Thresholds

pytestmark = pytest.mark.vllm


def test_a_run_saved_with_the_old_policy_key_reads_as_routing_policy(tmp_path: Path) -> None:
    w = workload(request("short/0", 0.0, 3000, 64), request("long/0", 0.1, 9000, 8, cls="long"))
    policy = make_policy("threshold", Thresholds(kv_usage=0.0, input_tokens=8192), "first")
    run = run_saved(tmp_path, w, engines=2, policy=policy)
    facts_file = tmp_path / "run" / "run.json"
    facts = json.loads(facts_file.read_text())
    facts["condition"]["routing_policy"] = "threshold"
    facts_file.write_text(json.dumps(facts))
    new = load_run(facts_file.parent)
    facts["condition"]["policy"] = facts["condition"].pop("routing_policy")
    facts_file.write_text(json.dumps(facts))
    old = load_run(facts_file.parent)
    assert old.facts["condition"] == new.facts["condition"]
    assert old.facts["condition"]["routing_policy"] == "threshold" and "policy" not in old.facts["condition"]
    assert run_metrics(old, None) == run_metrics(new, None)
    assert run_metrics(old, None).routed_away == 1  # read as the threshold rule: its moves are counted
    assert run.decisions == old.decisions
