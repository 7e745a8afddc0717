"""report.md's "Where the engine's time went": the per-step floor each variant paid above stock's."""

from __future__ import annotations

import pytest

from flatshare.colocation.results import CallerResult, ColocationSummary
from flatshare.colocation.steps_markdown import extra_floor, steps_lines, work_per_k_tokens
from summarykit import condition


def _ledger(steps: int, floor: float, busy: float, agent_work: float = 100.0) -> dict[str, float | None]:
    return {
        "window_s": 600.0,
        "work_s_priority_10": agent_work,
        "steps": steps,
        "decode_only_steps": steps // 2,
        "fixed_s": floor,
        "linear_s": 1.0,
        "prefill_attention_s": 0.5,
        "decode_attention_s": 0.5,
        "busy_s": busy,
        "floor_s": floor,
    }


def _summary(**blocks: dict[str, object]) -> ColocationSummary:
    by = {2: CallerResult(1.9, blocks)}  # type: ignore[arg-type]
    return ColocationSummary(2, 1.25, (2,), by)


def test_a_variant_that_ran_more_steps_shows_the_floor_it_paid_above_stock() -> None:
    stock = condition(
        step_ledger=_ledger(1000, 16.5, 200.0), agent_throughput_ratio=1.0, agent_tokens_per_s=50.0
    )
    held = condition(
        step_ledger=_ledger(1300, 21.45, 200.0, agent_work=99.0),
        agent_throughput_ratio=0.95,
        agent_tokens_per_s=47.5,
    )
    assert work_per_k_tokens(stock) == pytest.approx(100.0 / 30.0)
    assert work_per_k_tokens(held) == pytest.approx(99.0 / 28.5)
    assert extra_floor(held, stock) == pytest.approx((4.95, 4.95 / 200.0))
    lines = steps_lines(_summary(**{"vllm-priority": stock, "make-room-t48": held, "alone": condition()}))
    text = "\n".join(lines)
    assert text.startswith("## Where the engine's time went")
    rows = [line for line in lines if line.startswith("| `")]
    assert [r.split(" | ")[0] for r in rows] == ["| `vllm-priority`", "| `make-room-t48`"]
    assert "+4.9 (+2.5%)" in rows[1] or "+5.0 (+2.5%)" in rows[1]
    assert rows[1].endswith("| 99.0 | 3.47 (+4.2%) | 0.950 |")


def test_no_section_without_a_stock_ledger() -> None:
    real = {"vllm-priority": condition(), "make-room-t48": condition(step_ledger=_ledger(10, 1.0, 2.0))}
    assert steps_lines(_summary(**real)) == []
    assert extra_floor(real["make-room-t48"], real["vllm-priority"]) is None
