"""The seed's table beside a summary: values, ratios, fitted rows and tolerances."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from flatshare.colocation.results import CallerResult, ColocationSummary, ConditionResult, SeedComparisonRow
from flatshare.colocation.seed_table import SEED_ROWS, seed_comparison, seed_table_lines
from flatshare.colocation.setup import SEED, UNSTATED, Setup, unstated_lines


def _condition(**fields: Any) -> ConditionResult:
    """A condition with only `fields` measured (counts 0, figures None)."""
    empty: dict[str, Any] = {}
    for f in dataclasses.fields(ConditionResult):
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            empty[f.name] = 0 if f.type == "int" else () if f.type.startswith("tuple[Seconds, ...]") else None
    empty["make_room"] = empty["baseline_counters"] = {}
    return ConditionResult(**{**empty, **fields})


def _summary(**priority: float) -> ColocationSummary:
    stock = {
        "voice_turn_p95_s": 10.0,
        "voice_turn_p50_s": 2.0,
        "voice_over_target_frac": 0.85,
        "voice_over_10s_frac": 0.01,
        "voice_ttft_mean_s": 2.81,
        "stage_first_sentence_mean_s": 1.07,
        "agent_ttft_max_s": 100.0,
        "voice_call_ci": {"voice_over_10s_frac": (0.002, 0.03), "voice_turn_p50_s": (1.5, 2.6)},
        **priority,
    }
    alone = {"voice_turn_p95_s": 1.8, "voice_ttft_mean_s": 0.09, "stage_first_sentence_mean_s": 0.22}
    block = CallerResult(2.0, {"vllm-priority": _condition(**stock), "alone": _condition(**alone)})
    return ColocationSummary(version=1, voice_pipeline_fixed_s=1.25, callers=(2,), by_callers={2: block})


def test_rows_carry_seed_value_ratio_and_whether_they_were_fitted() -> None:
    rows = {r.row: r for r in seed_comparison(_summary())}
    p95 = rows["stock vLLM (priority): voice turn p95 s"]
    assert p95 == SeedComparisonRow(p95.row, seed=10.48, flatshare=10.0, ratio=0.954, fitted=True, hit=True)
    assert p95.ci is None  # the summary has no interval for it
    assert p95.to_json() == {
        "row": p95.row,
        "seed": 10.48,
        "flatshare": 10.0,
        "ratio": 0.954,
        "fitted": True,
        "hit": True,
        "ci": None,
    }
    over_10s = rows["stock vLLM: turns over 10 s"]
    assert over_10s.ci == (0.002, 0.03) and over_10s.hit is False  # a hit is judged on the figure alone
    ratio_row = rows["make-room T=48: agents' slowest first token vs stock"]
    assert ratio_row.ci is None  # a ratio between conditions has no interval
    assert rows["stock vLLM: voice turn median s"].hit is False  # 2.0 against 4.61
    assert rows["stock vLLM: turns over target"].hit is True  # 5 points off
    assert rows["stock vLLM: turns over 10 s"].hit is False  # 1% against 7%: a small share is held to 25%
    assert rows["voice alone: mean wait for the first token s"].fitted is False
    missing = rows["make-room T=48: voice turn p95 s"]
    assert missing.flatshare is None and missing.hit is None and missing.ratio is None
    fitted = {r.row for r in SEED_ROWS if r.fitted}
    assert all(row.startswith(("stock vLLM", "voice alone: turn p95")) for row in fitted)


def test_table_marks_misses_and_predictions() -> None:
    text = "\n".join(seed_table_lines(seed_comparison(_summary())))
    assert "| stock vLLM: voice turn median s | 4.61 | 2 | 1.5-2.6 | 0.43 | fitted | **no** |" in text
    assert "| make-room T=48: voice turn p95 s | 2.24 | - | - | - | predicted | - |" in text


def test_setup_lists_the_unstated_parameters_only_for_the_seed_preset() -> None:
    lines = unstated_lines(SEED.to_json())
    assert sum(line.startswith("| ") for line in lines) == len(UNSTATED) + 1
    other = unstated_lines(SEED.with_changes(max_model_len=32768).to_json())
    assert "not the seed preset" in other[-1]


def test_a_run_from_before_a_setup_field_ran_at_its_default_and_is_still_the_preset() -> None:
    older = SEED.to_json()
    del older["long_prefill_token_threshold"]  # runs made before the field existed
    assert "not the seed preset" not in unstated_lines(older)[-1]
    assert "not the seed preset" in unstated_lines({**older, "no_such_field": 1})[-1]


@pytest.mark.parametrize(
    "bad",
    [
        {"agent_source": "x"},
        {"voice_system_tokens": 0},
        {"api_latency_s": -1.0},
        {"long_prefill_token_threshold": -1},
    ],
)
def test_setup_rejects_bad_values(bad: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        Setup(**bad)
