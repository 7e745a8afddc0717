"""The admission summary's typed results write `summary.json`'s fields (docs/admission.md) and nothing else:
the comparison with the baseline flat in the condition, `vs_round-robin` only where it was computed,
seeds as string keys, `skipped` only in endpoint mode. (That the whole file is byte for byte what the
dict-built summary wrote is checked on a saved experiment; see the report of the change.)"""

from __future__ import annotations

import json
from typing import Any

import pytest

from flatshare.admission.attribution import AttributionConfig
from flatshare.admission.results import (
    AdmissionSummary,
    AttributionCounts,
    BaselineTest,
    ConditionResult,
    DecisionRow,
    EventSummary,
    LeverCell,
    PreferenceTest,
    Skipped,
    Slowdown,
    TopEvent,
    WorkloadResult,
)

CONDITION_FIELDS = {
    "n_runs",
    "n_short",
    "short_ttft_p95_s",
    "short_ttft_p95_ci",
    "ci_method",
    "per_seed_short_ttft_p95_s",
    "short_ttft_p50_s",
    "short_input_ttft_p95_s",
    "short_ttft_max_s",
    "long_requests",
    "long_ttft_s",
    "long_ttft_p95_s",
    "tokens_per_s",
    "routed_away_n",
    "routed_away_frac",
    "kv_usage_p50",
    "kv_usage_p95",
    "kv_usage_max",
    "waiting_p95",
    "preemptions",
    "failed",
    "make_room",
    "attribution",
    "p_value",
    "p_value_method",
    "mean_difference_s",
    "t",
    "n_pairs",
    "slowdown_vs_alone",
    "mean_ttlt_s",
    "mean_ttlt_ci",
    "ttlt_vs_baseline",
}

EVENT = {
    "engine": "e1",
    "start_s": 1.5,
    "end_s": 2.25,
    "shorts": ["s/1", "s/2"],
    "worst_slowdown": 7.5,
    "responsible": [{"request_id": "long/0", "kv_share": 0.8123}],
    "kv_usage_mean": 0.91,
}


def _condition(**changes: Any) -> ConditionResult:
    fields: dict[str, Any] = {
        "n_runs": 2,
        "n_short": 20,
        "short_ttft_p95_s": 1.0,
        "short_ttft_p95_ci": (0.5, 1.5),
        "ci_method": "t-interval over seeds",
        "per_seed_short_ttft_p95_s": (0.9, 1.1),
        "short_ttft_p50_s": 0.2,
        "short_input_ttft_p95_s": 0.9,
        "short_ttft_max_s": 1.2,
        "long_requests": 2,
        "long_ttft_s": 3.0,
        "long_ttft_p95_s": 3.1,
        "tokens_per_s": 100.0,
        "routed_away_n": None,
        "routed_away_frac": None,
        "kv_usage_p50": 0.1,
        "kv_usage_p95": 0.9,
        "kv_usage_max": 1.0,
        "waiting_p95": 3.0,
        "preemptions": 0.0,
        "failed": 0,
        "make_room": {"held_back": 1.5},
        "attribution": AttributionCounts(3, 1, 0, 0, 0),
        "vs_baseline": BaselineTest(),
        "vs_round_robin": None,
        "slowdown_vs_alone": Slowdown(1.5, 9.0),
    }
    return ConditionResult(**(fields | changes))


def _workload(**conditions: ConditionResult) -> WorkloadResult:
    return WorkloadResult(
        part="trace",
        engines=2,
        trace="azure-conv",
        rate=2.4,
        replay_s=30.0,
        baseline="off",
        replicates=2,
        long_input_tokens={0: 4000, 1: None},
        thresholds={1: {"kv_usage": 0.8}},
        thresholds_source="calibrated",
        conditions=conditions,
        top_events=(TopEvent(1, EventSummary.from_json(EVENT)),),
    )


def _summary(mode: str = "simulated", skipped: Skipped | None = None) -> AdmissionSummary:
    row = DecisionRow("azure-conv-e2", "on", 1, 12.5, "r/7", 9000, "e1", "e2", 0.93, "kv_pressure", None, ())
    return AdmissionSummary(
        version=1,
        mode=mode,
        endpoint=None,
        backends=("b0", "b1"),
        model=None,
        attribution_note=None,
        profile="a100",
        short_max_tokens=256,
        failed_ttft_s=30.0,
        attribution_config=AttributionConfig(),
        workloads={"azure-conv-e2": _workload(off=_condition())},
        levers={"synthetic": {"cell": LeverCell("A", 1.0, (0.5, None), None, 2.0, 10.0, None)}},
        decisions=(row,),
        decisions_total=1,
        skipped=skipped,
    )


def test_a_condition_writes_the_documented_fields_with_its_comparison_flat() -> None:
    test = BaselineTest(0.01, "paired t-test over replicates", -0.5, -3.2, 2)
    plain = _condition(vs_baseline=test).to_json()
    assert set(plain) == CONDITION_FIELDS
    assert (plain["p_value"], plain["n_pairs"], plain["short_ttft_p95_ci"]) == (0.01, 2, [0.5, 1.5])
    assert plain["slowdown_vs_alone"] == {"median": 1.5, "max": 9.0}
    on = _condition(vs_round_robin=PreferenceTest(0.2, "paired bootstrap", 0.1)).to_json()
    assert set(on) == CONDITION_FIELDS | {"vs_round-robin"}
    assert on["vs_round-robin"] == {"p_value": 0.2, "method": "paired bootstrap", "mean_difference_s": 0.1}


def test_seeds_are_string_keys_and_events_round_trip() -> None:
    written = _workload(off=_condition()).to_json()
    assert written["long_input_tokens"] == {"0": 4000, "1": None}
    assert written["thresholds"] == {"1": {"kv_usage": 0.8}}
    assert written["top_events"] == [{"seed": 1, **EVENT, "n_shorts": 2}]
    assert EventSummary.from_json(EVENT).to_json() == EVENT


def test_skipped_is_written_only_in_endpoint_mode() -> None:
    simulated = _summary().to_json()
    assert "skipped" not in simulated and simulated["backends"] == ["b0", "b1"]
    assert simulated["decisions"][0]["from"] == "e1" and "from_engine" not in simulated["decisions"][0]
    assert simulated["attribution_config"]["slowdown"] == AttributionConfig().slowdown
    assert _summary("endpoint").to_json()["skipped"] is None
    skipped = Skipped.from_json({"conditions": [{"key": "make-room", "why": "x"}], "traces": None})
    assert _summary("endpoint", skipped).to_json()["skipped"] == {
        "conditions": [{"key": "make-room", "why": "x"}],
        "traces": None,
    }
    json.dumps(_summary("endpoint", skipped).to_json())  # plain JSON all the way down


def test_a_summary_needs_workloads_and_a_known_mode() -> None:
    with pytest.raises(ValueError, match="mode must be simulated or endpoint"):
        _summary("wallclock")
    with pytest.raises(ValueError, match="no workloads"):
        AdmissionSummary(
            1, "simulated", None, None, None, None, "a100", 256, 30.0, AttributionConfig(), {}, {}, (), 0
        )
