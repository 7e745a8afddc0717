"""The frontier figure and the ablation, built by `build_report` from small hand-made saved runs; and a plan
without `vllm-priority`, whose report must still build."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from flatshare.colocation import figures
from flatshare.colocation.ablation import ablation_rows
from flatshare.colocation.frontier import PUBLISHED, frontier_figure, frontier_points
from flatshare.colocation.report import build_report
from flatshare.colocation.results import CallerResult, ColocationSummary
from flatshare.colocation.runs import FACTS, SavedRun, load_runs, run_dir
from flatshare.colocation.summary import load_summary, summarize
from flatshare.runfiles.records import ReplayRecord
from flatshare.runfiles.run import write_run
from summarykit import condition

DURATION_S = 100.0


def _voice(i: int, first_sentence_after: float) -> ReplayRecord:
    send = 5.0 * i
    times = [send + first_sentence_after * k / 3 for k in (1, 2, 3)]
    return ReplayRecord(
        f"v{i}", f"call{i % 2}", "voice", 0, 100, 3, "sim0", send, 3, times, times[-1], "length"
    )


def _agent(i: int, tokens: int, first_token_s: float) -> ReplayRecord:
    times = [first_token_s + (DURATION_S - first_token_s) * k / tokens for k in range(tokens)]
    return ReplayRecord(
        f"a{i}", f"agent{i}", "agent", 10, 1000, tokens, "sim0", 0.0, None, times, times[-1], "length"
    )


def _records(
    slow_turns: int, agent_tokens: int | None, agent_first_token_s: float = 1.0
) -> list[ReplayRecord]:
    """20 voice turns, `slow_turns` of them 4 s to the first sentence (the rest 0.3 s), and one agent."""
    voice = [_voice(i, 4.0 if i < slow_turns else 0.3) for i in range(20)]
    return voice + ([] if agent_tokens is None else [_agent(0, agent_tokens, agent_first_token_s)])


def _save(out: Path, condition: str, callers: int, records: list[ReplayRecord]) -> None:
    scheduler = "make-room" if condition.startswith("make-room") else "vllm"
    samples = [
        {"engine": "sim0", "t": float(t), "kv_usage": 0.5, "running": 1, "waiting": 0, "preemptions_total": 0,
         "cpu_tier_blocks": 0}
        for t in range(0, 100, 10)
    ]  # fmt: skip
    facts = {
        "duration_s": DURATION_S,
        "preemptions": 0,
        "scheduler_counters": {},
        "engine_config": {"scheduler": scheduler},
    }
    folder = run_dir(out, condition, callers, 0)
    folder.mkdir(parents=True)
    write_run(folder, records, samples, facts, facts_file=FACTS)


def _plan(out: Path, conditions: dict[str, list[ReplayRecord]], callers: tuple[int, ...]) -> None:
    for n in callers:
        for key, records in conditions.items():
            _save(out, key, n, records)


WITH_STOCK = {
    "alone": _records(0, None),
    "vllm-priority": _records(18, 1000, 10.0),
    "make-room-preempt": _records(6, 980, 10.0),
    "make-room-t48-pin": _records(0, 990, 11.0),  # meets the goal: over target as alone, 0.99, 1.1x
    "make-room-t48-hint": _records(0, 960, 10.0),  # agents at 0.96 of stock
    "agent-cap": _records(4, 900, 30.0),
}


def test_the_ablation_and_the_frontier_from_saved_runs(tmp_path: Path) -> None:
    _plan(tmp_path, WITH_STOCK, (2, 4))
    summary = build_report(tmp_path)
    for callers in (2, 4):
        block = summary.by_callers[callers]
        points = {p.condition: p for p in frontier_points(block)}
        # a point per condition with voice and agents: every make-room variant and every baseline
        assert set(points) == {"vllm-priority", "make-room-preempt", "make-room-t48-pin", "make-room-t48-hint",
                               "agent-cap"}  # fmt: skip
        assert points["vllm-priority"].agent_rate == 1.0 and points["vllm-priority"].over_target == 0.9
        assert points["agent-cap"].agent_wait == pytest.approx(3.0)
    assert (tmp_path / "frontier.png").stat().st_size > 0
    rows = [(r.callers, r.condition, r.below, r.meets_goal) for r in summary.ablation]
    assert rows == [
        (n, key, below, met)
        for n in (2, 4)
        for key, below, met in (
            ("vllm-priority", None, False),
            ("make-room-preempt", "vllm-priority", False),
            ("make-room-t48-pin", "make-room-preempt", True),
            ("make-room-t48-hint", "make-room-preempt", False),
        )
    ]
    hint = next(r for r in summary.ablation if r.condition == "make-room-t48-hint")
    assert (hint.meets_over_target, hint.meets_p95, hint.meets_agent_rate, hint.meets_agent_wait) == (
        True,
        True,
        False,
        True,
    )
    written = json.loads((tmp_path / "summary.json").read_text())
    assert [(r["callers"], r["condition"], r["meets_goal"]) for r in written["ablation"]] == [
        (n, key, met) for n, key, _, met in rows
    ]
    assert load_summary(tmp_path / "summary.json").ablation == summary.ablation
    report = (tmp_path / "report.md").read_text()
    assert "## make-room's ablation, and the frontier" in report and "![frontier" in report
    assert "### 4 callers" in report and "Variants meeting the goal: `make-room-t48-pin`." in report
    assert (
        "| `make-room-t48-pin` | `make-room-preempt` | the prefill hold, window T=16; a wider window"
        in report
    )


def test_the_write_ups_points_come_from_its_table() -> None:
    by_label = {p.label: p for p in PUBLISHED}
    assert (
        by_label["write-up: make-room T=48"].agent_rate,
        by_label["write-up: make-room T=48"].over_target,
    ) == (
        0.97,
        0.32,
    )
    pooled = [p for p in PUBLISHED if p.agent_rate is None]
    assert len(pooled) == 1 and pooled[0].callers == (2, 4, 6)
    assert pooled[0].over_target == pytest.approx(16 / 720)


def test_a_plan_without_vllm_priority_builds_its_report(tmp_path: Path) -> None:
    conditions = {k: v for k, v in WITH_STOCK.items() if k != "vllm-priority"}
    _plan(tmp_path, conditions, (2,))
    summary = build_report(tmp_path)
    for name in ("kv.png", "frontier.png", "tail.png", "report.md"):
        assert (tmp_path / name).stat().st_size > 0
    assert frontier_points(summary.first) == []  # no agent rate to compare with: no x
    pin = next(r for r in summary.ablation if r.condition == "make-room-t48-pin")
    assert pin.below == "make-room-preempt" and pin.agent_rate is None and pin.agent_wait is None
    assert pin.meets_agent_rate is None and pin.meets_goal is None and pin.meets_over_target is True
    assert "| - | - | yes | yes | - | - | - |" in (tmp_path / "report.md").read_text()


def test_the_kv_figure_without_vllm_priority_nor_make_room_t48(tmp_path: Path) -> None:
    _plan(tmp_path, {"alone": _records(0, None), "make-room-preempt": _records(2, 900)}, (2,))
    runs: list[SavedRun] = load_runs(tmp_path)
    figures.kv_figure(runs, summarize(runs), tmp_path / "kv.png")
    assert (tmp_path / "kv.png").stat().st_size > 0


def test_a_plan_without_alone_has_no_target_and_draws_no_point(tmp_path: Path) -> None:
    """The real-engine quick preset runs only vllm-priority and make-room-t48: no target, no y."""
    block = {
        key: condition(
            n_voice_turns=10, voice_turn_p95_s=p95, agent_throughput_ratio=rate, agent_ttft_max_s=5.0
        )
        for key, p95, rate in (("vllm-priority", 9.0, 1.0), ("make-room-t48", 2.0, 0.97))
    }
    summary = ColocationSummary(2, 1.25, (2, 4), {n: CallerResult(None, block) for n in (2, 4)})
    assert frontier_points(summary.first) == []
    frontier_figure(summary, tmp_path / "frontier.png")
    assert (tmp_path / "frontier.png").stat().st_size > 0
    t48 = [r for r in ablation_rows(summary) if r.condition == "make-room-t48"]
    assert [(r.callers, r.meets_p95, r.meets_over_target, r.meets_agent_rate, r.meets_goal) for r in t48] == [
        (2, None, None, True, None),
        (4, None, None, True, None),
    ]
