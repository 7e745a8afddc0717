"""The seed fit's loss reads only fitted rows, and only `alone` and `vllm-priority`: it refuses any other
row, and no figure outside the fitted rows moves it (checked on the committed full run's summary.json)."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest

from flatshare.colocation.fit_loss import FITTED_ROWS, fit_plan, loss
from flatshare.colocation.results import CallerResult, ColocationSummary, ConditionResult
from flatshare.colocation.seed_table import FIT_CONDITIONS, SEED_ROWS, RowKind, _Field
from flatshare.colocation.setup import SEED
from flatshare.colocation.summary import load_summary

SUMMARY = Path(__file__).resolve().parents[2] / "docs" / "results" / "colocation" / "summary.json"


@pytest.fixture(scope="module")
def full_run() -> ColocationSummary:
    return load_summary(SUMMARY)


def _fitted_fields() -> set[tuple[str, str]]:
    return {(row.get.condition, row.get.field) for row in FITTED_ROWS if isinstance(row.get, _Field)}


def _perturbed(m: ConditionResult, key: str, factor: float, offset: int) -> ConditionResult:
    """Every float and int figure of `m` moved (by `factor` and `offset`) except those a fitted row reads."""
    keep = {field for condition, field in _fitted_fields() if condition == key}
    changes: dict[str, object] = {}
    for f in dataclasses.fields(ConditionResult):
        value = getattr(m, f.name)
        if f.name in keep or isinstance(value, bool):
            continue
        if isinstance(value, float):
            changes[f.name] = value * factor
        elif isinstance(value, int):
            changes[f.name] = value + offset
        elif f.name.startswith("nth_token"):
            changes[f.name] = tuple(None if v is None else v * factor for v in value)
    return dataclasses.replace(m, **changes)  # type: ignore[arg-type]


def _perturb_all_but_fitted(summary: ColocationSummary) -> ColocationSummary:
    by_callers = {}
    for i, (n, block) in enumerate(summary.by_callers.items()):
        conditions = {
            key: _perturbed(m, key, 1.3 + 0.07 * j + 0.5 * i, 3 + j + 11 * i)
            for j, (key, m) in enumerate(block.conditions.items())
        }
        by_callers[n] = CallerResult(block.target_s, conditions)
    return dataclasses.replace(summary, by_callers=by_callers)


def test_the_loss_refuses_a_row_that_is_not_fitted(full_run: ColocationSummary) -> None:
    prediction = next(r for r in SEED_ROWS if r.kind is RowKind.PREDICTION)
    calibrated = next(r for r in SEED_ROWS if r.kind is RowKind.CALIBRATED)
    for row in (prediction, calibrated):
        with pytest.raises(ValueError, match="fitted rows only"):
            loss(full_run, (*FITTED_ROWS, row))


def test_the_loss_reads_the_fitted_rows() -> None:
    assert {r.kind for r in FITTED_ROWS} == {RowKind.FITTED}
    assert [r.row for r in FITTED_ROWS] == [r.row for r in SEED_ROWS if r.kind is RowKind.FITTED]
    assert {condition for condition, _ in _fitted_fields()} == set(FIT_CONDITIONS)
    assert len(_fitted_fields()) == len(FITTED_ROWS)  # every fitted row reads one figure of one condition


def test_moving_every_figure_but_the_fitted_rows_leaves_the_loss_unchanged(
    full_run: ColocationSummary,
) -> None:
    moved = _perturb_all_but_fitted(full_run)
    before = {r.row: r.get(full_run) for r in SEED_ROWS}
    after = {r.row: r.get(moved) for r in SEED_ROWS}
    for row in SEED_ROWS:  # every other row really moved, so the test can fail
        if row.kind is RowKind.FITTED:
            assert after[row.row] == before[row.row], row.row
        else:
            assert after[row.row] != before[row.row], row.row
    assert loss(moved) == loss(full_run)
    assert 0 < loss(full_run) < math.inf


def test_moving_any_fitted_figure_moves_the_loss(full_run: ColocationSummary) -> None:
    for condition, field in sorted(_fitted_fields()):
        block = full_run.first
        m = block.conditions[condition]
        changed = dataclasses.replace(m, **{field: getattr(m, field) * 1.1})
        by_callers = {**full_run.by_callers}
        by_callers[full_run.callers[0]] = CallerResult(
            block.target_s, {**block.conditions, condition: changed}
        )
        assert loss(dataclasses.replace(full_run, by_callers=by_callers)) != loss(full_run), field


def test_the_loss_needs_only_alone_and_vllm_priority(full_run: ColocationSummary) -> None:
    block = full_run.first
    only = {key: block.conditions[key] for key in FIT_CONDITIONS}
    fit_only = dataclasses.replace(
        full_run,
        callers=full_run.callers[:1],
        by_callers={full_run.callers[0]: CallerResult(block.target_s, only)},
    )
    assert loss(fit_only) == loss(full_run)
    without_alone = {"vllm-priority": block.conditions["vllm-priority"]}
    missing = dataclasses.replace(
        fit_only, by_callers={full_run.callers[0]: CallerResult(1.97, without_alone)}
    )
    assert loss(missing) == math.inf


@pytest.mark.vllm
def test_the_fit_runs_alone_and_vllm_priority_only() -> None:
    plan = fit_plan(SEED, seeds=2, duration_s=300.0)
    assert sorted(c.key for c in plan.conditions) == sorted(FIT_CONDITIONS)
    assert plan.callers == (2,) and plan.setup == SEED
