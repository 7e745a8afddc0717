"""The seed's table beside a summary: values, ratios, row kinds (fitted, calibrated, prediction), engine time
and tolerances."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from flatshare.colocation.results import CallerResult, ColocationSummary, SeedComparisonRow
from flatshare.colocation.seed_markdown import seed_counts_line, seed_table_lines
from flatshare.colocation.seed_table import SEED_ROWS, RowKind, SeedRow, seed_comparison, spreads_over
from flatshare.colocation.setup import SEED, UNSTATED, Setup, unstated_lines
from summarykit import condition as _condition


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


def test_rows_carry_seed_value_ratio_kind_and_engine_time() -> None:
    rows = {r.row: r for r in seed_comparison(_summary())}
    p95 = rows["stock vLLM (priority): voice turn p95 s"]
    assert p95 == SeedComparisonRow(
        p95.row,
        seed=10.48,
        flatshare=10.0,
        ratio=0.954,
        kind="fitted",
        hit=True,
        seed_engine_s=9.23,
        engine_s=8.75,
    )
    assert p95.ci is None  # the summary has no interval for it
    assert p95.to_json() == {
        "row": p95.row,
        "seed": 10.48,
        "flatshare": 10.0,
        "ratio": 0.954,
        "kind": "fitted",
        "hit": True,
        "ci": None,
        "seed_engine_s": 9.23,
        "engine_s": 8.75,
        "spread_low": None,
        "spread_high": None,
    }
    over_10s = rows["stock vLLM: turns over 10 s"]
    assert over_10s.ci == (0.002, 0.03) and over_10s.hit is False  # a hit is judged on the figure alone
    ratio_row = rows["make-room T=48: agents' slowest first token vs stock"]
    assert ratio_row.ci is None  # a ratio between conditions has no interval
    assert rows["stock vLLM: voice turn median s"].hit is False  # 2.0 against 4.61
    assert rows["stock vLLM: turns over target"].hit is True  # 5 points off
    assert rows["stock vLLM: turns over 10 s"].hit is False  # 1% against 7%: a small share is held to 25%
    assert rows["voice alone: mean wait for the first token s"].kind == "calibrated"
    assert rows["voice alone: mean wait for the first token s"].engine_s is None  # not a turn row
    missing = rows["make-room T=48: voice turn p95 s"]
    assert missing.flatshare is None and missing.hit is None and missing.ratio is None
    fitted = {r.row for r in SEED_ROWS if r.kind is RowKind.FITTED}
    assert all(row.startswith(("stock vLLM", "voice alone: turn p95")) for row in fitted)


def test_calibrated_rows_are_the_two_pinned_voice_alone_rows() -> None:
    calibrated = {r.row for r in SEED_ROWS if r.kind is RowKind.CALIBRATED}
    assert calibrated == {
        "voice alone: mean wait for the first token s",  # the 0.06 s API pass was kept to match it
        "voice alone: mean time to decode the first sentence s",  # the profile's per-token time
    }


def test_a_turn_row_is_judged_on_engine_time_not_on_the_total() -> None:
    # Voice alone at 1.5 s is within 25% of the seed's 1.8 s, but its engine time (0.25 s against the
    # seed's 0.55 s, the fixed 1.25 s pipeline taken off both) is not.
    row = {r.row: r for r in seed_comparison(_summary())}["voice alone: turn p95 s"]
    assert row.hit is True and row.engine_s == 0.55
    alone = {"voice_turn_p95_s": 1.5, "voice_ttft_mean_s": 0.09, "stage_first_sentence_mean_s": 0.22}
    summary = _summary()
    block = CallerResult(2.0, {**summary.conditions, "alone": _condition(**alone)})
    row = {r.row: r for r in seed_comparison(dataclasses.replace(summary, by_callers={2: block}))}[row.row]
    assert row.ratio == 0.833 and row.engine_s == 0.25 and row.seed_engine_s == 0.55
    assert row.hit is False


def test_a_fitted_row_reads_one_figure_of_alone_or_vllm_priority_only() -> None:
    stock = SEED_ROWS[0]
    SeedRow("ok", 1.0, stock.get, RowKind.FITTED)
    with pytest.raises(ValueError, match="fitted row"):
        SeedRow("make-room", 2.24, SEED_ROWS[12].get, RowKind.FITTED)  # make-room T=48's p95
    with pytest.raises(ValueError, match="fitted row"):
        SeedRow("a ratio", 1.0, SEED_ROWS[16].get, RowKind.FITTED)  # a ratio between two conditions


def test_table_marks_misses_kinds_and_engine_time() -> None:
    rows = seed_comparison(_summary())
    text = "\n".join(seed_table_lines(rows))
    assert (
        "| stock vLLM: voice turn median s | 4.61 | 2 | 1.5-2.6 | 0.43 | 3.36 / 0.75 (0.22) | fitted | **no** |"
        in text
    )
    assert "| make-room T=48: voice turn p95 s | 2.24 | - | - | - | 0.99 / - | prediction | - |" in text
    assert (
        "| voice alone: mean wait for the first token s | 0.09 | 0.09 | - | 1.00 | - | calibrated | yes |"
        in text
    )
    assert "| stock vLLM: turns over 10 s | 1 in 14 | 1 in 100 | 1 in 500 to 1 in 33 |" in text
    counts = seed_counts_line(rows)
    assert "5 of 7 within tolerance" in counts  # the median and the turns over 10 s miss
    assert "calibrated rows (pinned by a choice made to match them; not predictions): 2 of 2" in counts
    assert "predictions, not refitted: 0 of 0" in counts


def test_setup_lists_the_unstated_parameters_only_for_the_seed_preset() -> None:
    lines = unstated_lines(SEED.to_json())
    assert sum(line.startswith("| ") for line in lines) == len(UNSTATED) + 1
    pipeline = next(line for line in lines if line.startswith("| voice pipeline outside the engine"))
    assert pipeline.endswith("| calibrated |")
    assert next(line for line in lines if line.startswith("| API server pass")).endswith("| calibrated |")
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


def test_the_preset_under_another_step_model_says_its_fitted_rows_are_that_models_predictions() -> None:
    lines = unstated_lines(SEED.with_changes(profile="llama3-8b-24gb-roofline").to_json())
    assert "under another step model (`llama3-8b-24gb-roofline`)" in lines[-1]
    assert not any(line.startswith("| parameter |") for line in lines)


def test_a_spread_that_holds_the_source_documents_figure_is_a_hit_where_the_point_misses() -> None:
    summary = _summary(voice_ttft_mean_s=2.0)  # 2.0 against the document's 2.81: outside 25%
    near = _summary(voice_ttft_mean_s=3.2)
    rows = {r.row: r for r in seed_comparison(summary, spreads_over(summary, [near]))}
    wait = rows["stock vLLM: mean wait for the first token s"]
    assert (wait.flatshare, wait.spread_low, wait.spread_high, wait.hit) == (2.0, 2.0, 3.2, True)
    assert {r.row: r for r in seed_comparison(summary)}[
        "stock vLLM: mean wait for the first token s"
    ].hit is False
    far = _summary(voice_ttft_mean_s=1.5)
    rows = {r.row: r for r in seed_comparison(summary, spreads_over(summary, [far]))}
    assert rows["stock vLLM: mean wait for the first token s"].hit is False  # 1.5-2.0: not within 25% of 2.81


def test_a_turn_rows_spread_is_judged_on_engine_time() -> None:
    summary = _summary(voice_turn_p95_s=8.0)  # engine 6.75 against the document's 9.23: a miss on its own
    rows = {
        r.row: r for r in seed_comparison(summary, spreads_over(summary, [_summary(voice_turn_p95_s=9.0)]))
    }
    p95 = rows["stock vLLM (priority): voice turn p95 s"]
    assert (p95.spread_low, p95.spread_high) == (8.0, 9.0)
    assert p95.hit is True  # engine 7.75 at the high end is within 25% of 9.23
