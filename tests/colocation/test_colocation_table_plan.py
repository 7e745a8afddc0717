"""The plan cut to what the write-up's table reads: every row gets its figure from those runs alone, no run
is spare, and a row added to the table brings its conditions with it."""

from __future__ import annotations

import dataclasses

import pytest

from flatshare.colocation import seed_table
from flatshare.colocation.experiment import QUICK, ColocationPlan
from flatshare.colocation.results import CallerResult, ColocationSummary, ConditionResult
from flatshare.colocation.seed_table import SEED_ROWS, table_reads
from flatshare.colocation.table_plan import table_plans
from summarykit import condition

pytestmark = pytest.mark.vllm


def _measured(callers: int) -> ConditionResult:
    """A condition with every figure the table reads measured (`callers` squared of its 100 turns over target)."""
    counts = {"n_voice_turns": 100, "voice_over_target_turns": callers**2, "nth_token_median_s": (1.0,) * 64}
    figures = {
        f.name: 1.0
        for f in dataclasses.fields(ConditionResult)
        if f.name.startswith(("voice_", "agent_", "stage_")) and f.name not in {"voice_call_ci", *counts}
    }
    return condition(**figures, **counts)


def _cells(plans: tuple[ColocationPlan, ...]) -> set[tuple[str, int]]:
    return {(c.key, n) for plan in plans for n in plan.callers for c in plan.conditions}


def _summary(cells: set[tuple[str, int]]) -> ColocationSummary:
    callers = tuple(sorted({n for _, n in cells}))
    blocks = {n: CallerResult(2.0, {key: _measured(n) for key, m in cells if m == n}) for n in callers}
    return ColocationSummary(version=2, voice_pipeline_fixed_s=1.25, callers=callers, by_callers=blocks)


def test_the_full_plan_runs_the_tables_conditions_at_2_callers_and_every_fix_with_its_target_at_all() -> None:
    cells = _cells(table_plans(ColocationPlan()))
    keys = {"vllm-priority", "alone", "make-room-preempt", "make-room-t16", "make-room-t48"}
    keys |= {"make-room-t48-256", "make-room-t48-decode", "make-room-t48-256-decode"}
    pooled = {(key, n) for key in ("alone", "make-room-t48-256-decode") for n in (4, 6)}
    assert cells == {(key, 2) for key in keys} | pooled  # 60 runs a point at 5 seeds, against 305


def test_every_row_gets_its_figure_from_the_plans_runs_and_none_is_spare() -> None:
    cells = _cells(table_plans(ColocationPlan()))
    figures = [row.get(_summary(cells)) for row in SEED_ROWS]
    assert None not in figures
    for cell in cells - {("alone", 4), ("alone", 6)}:  # alone there sets the target, which summarize reads
        assert [row.get(_summary(cells - {cell})) for row in SEED_ROWS] != figures, cell


def test_the_pooled_row_reads_alone_at_every_caller_count_for_its_target() -> None:
    assert table_reads()["alone"] is True and table_reads()["make-room-t48-256-decode"] is True
    assert table_reads()["make-room-t48"] is False


def test_the_quick_plan_is_one_plan_at_2_callers() -> None:
    (plan,) = table_plans(QUICK)
    assert plan.callers == (2,) and (plan.seeds, plan.duration_s, plan.drain_s) == (2, 300.0, 60.0)
    assert {c.key for c in plan.conditions} == set(table_reads())


def test_a_row_added_to_the_table_brings_its_condition_at_the_caller_counts_it_reads() -> None:
    added = dataclasses.replace(
        SEED_ROWS[-2], row="pin", get=seed_table._m("make-room-t48-pin", "voice_turn_p95_s")
    )
    cells = _cells(table_plans(ColocationPlan(), (*SEED_ROWS, added)))
    assert ("make-room-t48-pin", 2) in cells and ("make-room-t48-pin", 4) not in cells
