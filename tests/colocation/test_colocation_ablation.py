"""make-room's ablation from hand-made results: the variant below each, what it changed, the goal's verdicts."""

from __future__ import annotations

import pytest

from flatshare.colocation.ablation import EDGES, PARENT, ablation_rows, below
from flatshare.colocation.ablation_markdown import ablation_lines
from flatshare.colocation.experiment import EVERY_CONDITION
from flatshare.colocation.goal import Goal
from flatshare.colocation.results import CallerResult, ColocationSummary, ConditionResult
from summarykit import condition


def _voice(
    over: float, p95: float, rate: float | None, wait: float | None, **more: object
) -> ConditionResult:
    return condition(
        n_voice_turns=100,
        voice_over_target_frac=over,
        voice_turn_p95_s=p95,
        agent_throughput_ratio=rate,
        agent_ttft_max_s=wait,
        **more,
    )


def _summary(
    blocks: dict[int, dict[str, ConditionResult]], target_s: float | None = 2.0
) -> ColocationSummary:
    by_callers = {n: CallerResult(target_s, conditions) for n, conditions in blocks.items()}
    return ColocationSummary(2, 1.25, tuple(sorted(blocks)), by_callers)


def test_every_make_room_condition_of_the_experiment_has_a_variant_below_it() -> None:
    every = EVERY_CONDITION
    make_room = {c.key for c in every if c.scheduler == "make-room"}
    assert make_room == set(PARENT)
    present = {c.key: c for c in every}
    for edge in EDGES:  # each parent is a condition the plan can run, and the chain ends at stock
        assert edge.parent in present
        assert below(edge.child, present) == edge.parent
    assert all(below(key, {"vllm-priority": 1}) == "vllm-priority" for key in PARENT)


def test_rows_carry_the_change_over_the_nearest_present_ancestor_and_each_criterion() -> None:
    block = {
        "alone": _voice(0.01, 1.5, None, None),
        "vllm-priority": _voice(0.9, 10.0, 1.0, 100.0),
        "make-room-preempt": _voice(0.3, 5.0, 0.99, 105.0),
        # no make-room-t16: t48 is compared with the preemption alone, and says it adds both steps
        "make-room-t48": _voice(
            0.015, 1.9, 0.975, 110.0, voice_call_ci={"voice_over_target_frac": (0.005, 0.03)}
        ),
        "make-room-t48-pin": _voice(0.01, 1.8, 0.95, 100.0),  # agents lose 5%: fails the rate
        "make-room-t48-hint": _voice(0.012, 1.8, 0.98, 130.0),  # 1.3x stock's slowest wait
        "make-room-t48-decode": _voice(0.05, 2.1, 0.99, 100.0),  # over alone + 1 point, p95 over target
        "agent-cap": _voice(0.5, 8.0, 0.9, 300.0),  # a baseline: no ablation row
    }
    rows = {r.condition: r for r in ablation_rows(_summary({2: block}))}
    assert list(rows) == [
        "vllm-priority",
        "make-room-preempt",
        "make-room-t48",
        "make-room-t48-decode",
        "make-room-t48-pin",
        "make-room-t48-hint",
    ]
    t48 = rows["make-room-t48"]
    assert t48.below == "make-room-preempt"
    assert t48.adds == "the prefill hold, window T=16; a wider window, T=48"
    assert t48.over_target_delta == pytest.approx(0.015 - 0.3)
    assert t48.turn_p95_delta_s == pytest.approx(1.9 - 5.0)
    assert t48.agent_rate_delta == pytest.approx(0.975 - 0.99)
    assert t48.agent_wait == pytest.approx(1.1)
    assert t48.over_target_ci == (0.005, 0.03)
    assert (t48.meets_over_target, t48.meets_p95, t48.meets_agent_rate, t48.meets_agent_wait) == (
        True,
        True,
        True,
        True,
    )
    assert t48.meets_goal is True
    pin, hint, decode = rows["make-room-t48-pin"], rows["make-room-t48-hint"], rows["make-room-t48-decode"]
    assert pin.below == "make-room-t48" and pin.meets_agent_rate is False and pin.meets_goal is False
    assert hint.meets_agent_wait is False and hint.meets_goal is False and hint.meets_agent_rate is True
    assert decode.meets_over_target is False and decode.meets_p95 is False and decode.meets_agent_wait is True
    root = rows["vllm-priority"]
    assert root.below is None and root.over_target_delta is None and root.meets_p95 is False
    table = ablation_lines(tuple(rows.values()), 2)
    assert len(table) == 2 + len(rows)
    assert all(line.count("|") == table[0].count("|") for line in table)
    assert (
        "| 1.5% [0.5-3.0] (-28.5 pt) | 1.90 (-3.10) | 0.975 (-0.015) | 1.10x | yes | yes | yes | yes | yes |"
        in (table[4])
    )
    assert ablation_lines(tuple(rows.values()), 4) == []


def test_without_stock_or_alone_the_criteria_they_judge_are_unknown_not_no() -> None:
    block = {"make-room-t48": _voice(0.0, 1.0, None, 50.0), "make-room-t48-pin": _voice(0.0, 3.0, None, 50.0)}
    rows = ablation_rows(_summary({4: block}))
    assert [(r.condition, r.below, r.callers) for r in rows] == [
        ("make-room-t48", None, 4),
        ("make-room-t48-pin", "make-room-t48", 4),
    ]
    t48, pin = rows
    assert (t48.meets_over_target, t48.meets_agent_rate, t48.meets_agent_wait, t48.meets_p95) == (
        None,
        None,
        None,
        True,
    )
    assert t48.meets_goal is None and pin.meets_goal is False  # its p95 is over the target: known to fail
    assert pin.agent_rate_delta is None and pin.turn_p95_delta_s == pytest.approx(2.0)


def test_rows_follow_every_caller_count_and_a_stricter_goal() -> None:
    def block(over: float) -> dict[str, ConditionResult]:
        return {
            "alone": _voice(0.0, 1.5, None, None),
            "vllm-priority": _voice(0.9, 10.0, 1.0, 100.0),
            "make-room-t48": _voice(over, 1.9, 0.98, 100.0),
        }

    summary = _summary({2: block(0.005), 6: block(0.04)})
    verdicts = [(r.callers, r.meets_goal) for r in ablation_rows(summary) if r.condition == "make-room-t48"]
    assert verdicts == [(2, True), (6, False)]
    stricter = Goal(agent_rate=0.99)
    assert not any(r.meets_goal for r in ablation_rows(summary, stricter))
    with pytest.raises(ValueError, match="agent_rate"):
        Goal(agent_rate=1.5)
