"""A small admission plan end to end: runs saved, summary + report + figures, the synthetic effect shown
with its CI and paired test over 10 seeds, and the report rebuilt identically from the saved runs."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from flatshare.admission.command import build_plan, experiment_admission
from flatshare.admission.experiment import run_plan
from flatshare.admission.plan import TRACE_CONDITIONS, AdmissionPlan, SyntheticPlan, TraceCase
from flatshare.admission.report import build_report
from flatshare.admission.runs import is_admission_experiment
from flatshare.cli import app
from flatshare.errors import InputError

pytestmark = pytest.mark.vllm

FIELDS = (
    "short_ttft_p95_s",
    "short_ttft_p95_ci",
    "long_ttft_s",
    "tokens_per_s",
    "routed_away_frac",
    "p_value",
    "mean_ttlt_s",
    "ttlt_vs_baseline",
)


def _plan(traces_dir: Path) -> AdmissionPlan:
    conv = TraceCase(
        "azure-conv",
        "azure",
        str(traces_dir / "azure-llm-2023/AzureLLMInferenceTrace_conv.csv"),
        2.4,
        30.0,
        600.0,
    )
    synthetic = SyntheticPlan(
        seeds=10, long_tokens=30_000, long_max_tokens=8, short_max_tokens=32, long_first=False
    )
    return AdmissionPlan(
        synthetic=synthetic,
        traces=(conv,),
        engines=(2,),
        windows=1,
        trace_conditions=TRACE_CONDITIONS,
        drain_s=60.0,
        workers=2,
    )


def test_small_plan_shows_the_synthetic_effect_and_writes_everything(
    traces_dir: Path, tmp_path: Path
) -> None:
    run_plan(tmp_path, _plan(traces_dir))
    summary = build_report(tmp_path)
    for name in ("summary.json", "report.md", "synthetic.png", "traces.png", "levers.png", "attribution.png"):
        assert (tmp_path / name).stat().st_size > 0, name
    assert is_admission_experiment(tmp_path)
    synthetic = summary.workloads["synthetic"].conditions
    a, b = synthetic["A-fcfs-one-engine"], synthetic["B-controller"]
    assert a.n_runs == b.n_runs == 10
    assert b.routed_away_frac == 1.0
    assert a.short_ttft_p95_ci is not None and b.short_ttft_p95_ci is not None
    assert (b.short_ttft_p95_ci[1] or 0) < (a.short_ttft_p95_ci[0] or 0)  # the intervals do not overlap
    test = b.vs_baseline
    assert test.p_value is not None and test.p_value < 0.05
    assert test.n_pairs == 10 and test.p_value_method == "paired t-test over replicates"
    assert (synthetic["alone"].short_ttft_p95_s or 1.0) < 0.2
    assert (summary.levers["synthetic"]["routing-off/make-room-on"].reduction_s or 0.0) > 0
    sage = synthetic["sage"]  # the SageSched-style baseline, beside FCFS with the same tests
    assert sage.n_runs == 10 and sage.mean_ttlt_ci is not None and sage.short_ttft_p95_ci is not None
    assert sage.vs_baseline.n_pairs == 10 and sage.ttlt_vs_baseline.n_pairs == 10
    assert sage.make_room["prefill_preemptions"] > 0  # its counters reach the summary
    assert (sage.short_ttft_p95_s or 0.0) < (a.short_ttft_p95_s or 0.0)
    assert "controller+sage" in synthetic
    trace = summary.workloads["azure-conv-e2"]
    assert set(trace.conditions) == {c.key for c in TRACE_CONDITIONS}
    assert trace.thresholds_source == "calibrated"
    assert trace.conditions["on"].routed_away_frac is not None
    assert trace.conditions["off"].routed_away_frac is None
    assert trace.conditions["on"].vs_round_robin is not None  # the rule against its own preference
    assert any(r.workload == "synthetic" and r.baseline_events for r in summary.decisions)
    report = (tmp_path / "report.md").read_text()
    assert "Run A" in report and "Run B" in report and "azure-conv-e2" in report
    before = (tmp_path / "summary.json").read_bytes()
    written = json.loads(before)
    assert written == json.loads(json.dumps(summary.to_json()))
    for workload in (written["workloads"]["synthetic"], written["workloads"]["azure-conv-e2"]):
        for m in workload["conditions"].values():  # the fields docs/admission.md promises
            assert all(field in m for field in FIELDS)
    assert "vs_round-robin" in written["workloads"]["azure-conv-e2"]["conditions"]["on"]
    rebuilt = CliRunner().invoke(app, ["report", str(tmp_path)])  # `flatshare report` knows the kind
    assert rebuilt.exit_code == 0, rebuilt.output
    assert (tmp_path / "summary.json").read_bytes() == before
    assert json.loads(before)["version"] == 1


def test_options_map_onto_the_plan(traces_dir: Path) -> None:
    plan = build_plan(False, traces_dir, engines="2,3", seeds=4, windows=2, workers=1)
    assert (plan.engines, plan.synthetic.seeds, plan.windows, plan.workers) == ((2, 3), 4, 2, 1)
    quick = build_plan(True, traces_dir)
    assert quick.windows == 1 and quick.synthetic.seeds == 10 and quick.engines == (2, 4)
    assert dataclasses.replace(quick, workers=1).traces == quick.traces


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"engines": "1,2"}, "at least 2 engines"),
        ({"engines": "two"}, "comma-separated integers"),
        ({"traces": Path("/no/such/traces")}, "is not a folder"),
        ({"executor": "threads"}, "--executor must be one of local, ray"),
    ],
)
def test_bad_options_are_clear_errors(
    traces_dir: Path, tmp_path: Path, kwargs: dict[str, object], message: str
) -> None:
    args: dict[str, object] = {"traces": traces_dir, "quick": True} | kwargs
    with pytest.raises(InputError, match=message):
        experiment_admission(tmp_path, **args)  # type: ignore[arg-type]
