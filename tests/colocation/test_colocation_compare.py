"""Two co-location experiments side by side: setup differences, conclusions, and the ones that flip."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from flatshare.cli import app
from flatshare.colocation.compare import Flip, conclusions, flips, render, setup_differences
from flatshare.colocation.results import CallerResult, ColocationSummary
from flatshare.colocation.seed_table import seed_comparison
from summarykit import condition


def _summary(profile: str, t48_over: float, t48_agents: float) -> ColocationSummary:
    stock = condition(
        voice_turn_p95_s=10.4, voice_over_target_frac=0.86, agent_throughput_ratio=1.0, agent_ttft_max_s=100.0
    )
    alone = condition(voice_turn_p95_s=1.72, voice_over_target_frac=0.01, voice_ttft_mean_s=0.087)
    t48 = condition(
        voice_turn_p95_s=2.34,
        voice_over_target_frac=t48_over,
        agent_throughput_ratio=t48_agents,
        agent_ttft_max_s=82.0,
    )
    block = CallerResult(2.0, {"alone": alone, "vllm-priority": stock, "make-room-t48": t48})
    summary = ColocationSummary(
        version=2,
        voice_pipeline_fixed_s=1.25,
        callers=(2,),
        by_callers={2: block},
        setup={"profile": profile, "kv_tokens": 45056},
    )
    return dataclasses.replace(summary, seed_comparison=seed_comparison(summary))


def test_conclusions_read_the_goals_bounds() -> None:
    found = conclusions(_summary("additive", t48_over=0.44, t48_agents=0.988))
    assert found["2 callers, make-room-t48: fewer turns over target than stock"] is True
    assert found["2 callers, make-room-t48: agents keep >= 97% of stock's rate"] is True
    assert found["2 callers, make-room-t48: agents' slowest first token <= 1.2x stock"] is True
    assert found["2 callers, make-room-t48: voice turn p95 within target"] is False
    assert found["2 callers, alone: voice turn p95 within target"] is True
    assert "2 callers, vllm-priority: fewer turns over target than stock" not in found  # not against itself
    assert found["write-up row hit: stock vLLM (priority): voice turn p95 s"] is True


def test_a_conclusion_that_differs_is_a_flip_and_nothing_else_is() -> None:
    a = _summary("additive", t48_over=0.44, t48_agents=0.988)
    b = _summary("roofline", t48_over=0.44, t48_agents=0.90)
    assert flips(a, b) == [Flip("2 callers, make-room-t48: agents keep >= 97% of stock's rate", True, False)]
    assert flips(a, a) == []
    assert setup_differences(a, b) == {"profile": ("additive", "roofline")}


def test_a_condition_one_side_lacks_is_not_a_flip() -> None:
    a = _summary("additive", t48_over=0.44, t48_agents=0.988)
    b = _summary("roofline", t48_over=0.95, t48_agents=0.5)
    only_stock = {k: v for k, v in b.by_callers[2].conditions.items() if k != "make-room-t48"}
    b = dataclasses.replace(b, by_callers={2: CallerResult(2.0, only_stock)})
    assert not [f for f in flips(a, b) if "make-room-t48" in f.conclusion]


def test_the_page_names_both_models_and_the_flip() -> None:
    a = _summary("additive", t48_over=0.44, t48_agents=0.988)
    b = _summary("roofline", t48_over=0.90, t48_agents=0.988)
    text = "\n".join(render(a, b, "additive", "roofline"))
    assert "Setup differences: `profile` additive / roofline." in text
    assert "| 2 callers, make-room-t48: fewer turns over target than stock | yes | no |" in text
    assert "| make-room-t48 | 2.34 / 2.34 | 44.0% / 90.0% |" in text
    assert "(engine " in text  # turn rows carry engine time


def test_the_command_writes_the_page_and_refuses_a_folder_without_a_summary(tmp_path: Path) -> None:
    for name, over in (("a", 0.44), ("b", 0.9)):
        (tmp_path / name).mkdir()
        summary = _summary(f"model-{name}", t48_over=over, t48_agents=0.99)
        (tmp_path / name / "summary.json").write_text(json.dumps(summary.to_json()))
    runner = CliRunner()
    result = runner.invoke(
        app, ["compare", str(tmp_path / "a"), str(tmp_path / "b"), "--out", str(tmp_path / "c.md")]
    )
    assert result.exit_code == 0, result.output
    assert "| model-a | hit | model-b | hit |" in (tmp_path / "c.md").read_text()
    (tmp_path / "empty").mkdir()
    result = runner.invoke(app, ["compare", str(tmp_path / "a"), str(tmp_path / "empty")])
    assert result.exit_code == 2
    assert "summary.json" in result.output


@pytest.mark.parametrize("content", ["[]", '{"version": 2}'])
def test_a_file_that_is_not_a_summary_is_refused_with_its_name(tmp_path: Path, content: str) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "summary.json").write_text(content)
    result = CliRunner().invoke(app, ["compare", str(tmp_path / "a"), str(tmp_path / "a")])
    assert result.exit_code == 2
    assert "summary.json" in result.output
