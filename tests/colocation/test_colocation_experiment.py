"""The co-location experiment end to end on a small plan, and `flatshare report` rebuilding it."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from flatshare.cli import app
from flatshare.colocation.experiment import (
    BASELINE_CONDITIONS,
    MAIN_CONDITIONS,
    RIDE_CONDITIONS,
    ColocationPlan,
    pick_conditions,
    run_plan,
)
from flatshare.colocation.report import build_report
from flatshare.colocation.summary import SUMMARY_VERSION, load_summary
from flatshare.listen.speech import missing_tools
from flatshare.scheduler.config import MakeRoomConfig

pytestmark = pytest.mark.vllm

KEYS = (
    "alone",
    "agents-alone",
    "vllm-priority",
    "make-room-preempt",
    "make-room-t48",
    "agent-cap",
    "reserve-voice",
)


def test_small_plan_writes_summary_report_and_figures_and_rebuilds_identically(tmp_path: Path) -> None:
    conditions = tuple(c for c in MAIN_CONDITIONS + BASELINE_CONDITIONS if c.key in KEYS)
    plan = ColocationPlan(
        callers=(2,), agents=4, seeds=2, duration_s=90.0, drain_s=30.0, conditions=conditions, workers=1
    )
    run_plan(tmp_path, plan)
    summary = build_report(tmp_path)
    for name in (
        "summary.json",
        "report.md",
        "tail.png",
        "window_sweep.png",
        "stages.png",
        "cdf.png",
        "kv.png",
    ):
        assert (tmp_path / name).stat().st_size > 0
    written = json.loads((tmp_path / "summary.json").read_text())
    assert written == json.loads(json.dumps(summary.to_json()))
    for key in KEYS:
        m = written["conditions"][key]
        for field in ("voice_turn_p50_s", "voice_turn_p95_s", "voice_over_target_frac", "voice_failed_turns",
                      "voice_ttft_mean_s", "voice_first_sentence_mean_s", "agent_tokens_per_s",
                      "agent_throughput_ratio", "agent_ttft_max_s", "preemptions", "n_voice_turns"):  # fmt: skip
            assert field in m
    assert summary.conditions["alone"].n_voice_turns > 0
    assert (summary.conditions["agents-alone"].agent_tokens_per_s or 0) > 0
    assert (summary.target_s or 0) > 1.0
    assert (summary.conditions["make-room-t48"].make_room["hold_steps"] or 0) > 0
    # baselines carry their counters (a gateway-side and an engine-side one) and get their report section
    assert "held_agent" in summary.conditions["agent-cap"].baseline_counters
    assert "refused_admissions" in summary.conditions["reserve-voice"].baseline_counters
    assert summary.conditions["vllm-priority"].baseline_counters == {}
    report = (tmp_path / "report.md").read_text()
    assert "## Baselines" in report and "| `agent-cap` |" in report and "| `reserve-voice` |" in report
    if not missing_tools():  # the slowest stock turn beside make-room, rendered and linked
        assert (tmp_path / "worst-turn.wav").stat().st_size > 0
        assert "](worst-turn.wav)" in (tmp_path / "report.md").read_text()
    before = (tmp_path / "summary.json").read_bytes()
    result = CliRunner().invoke(app, ["report", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "summary.json").read_bytes() == before
    assert json.loads(before)["version"] == SUMMARY_VERSION


def test_report_on_a_folder_without_runs_is_a_clear_error(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["report", str(tmp_path)])
    assert result.exit_code == 2
    assert "no runs/ folder" in result.output


def test_the_engine_runs_the_setups_scheduling_mode() -> None:
    from flatshare.colocation.experiment import engine_config
    from flatshare.colocation.setup import SEED

    stock = next(c for c in MAIN_CONDITIONS if c.key == "vllm-priority")
    assert SEED.async_scheduling  # vLLM 0.32's default on a GPU
    assert engine_config(stock, SEED).async_scheduling
    assert not engine_config(stock, SEED.with_changes(async_scheduling=False)).async_scheduling


def test_the_engine_takes_the_setups_prefill_cap() -> None:
    from flatshare.colocation.experiment import engine_config
    from flatshare.colocation.setup import SEED

    stock = next(c for c in MAIN_CONDITIONS if c.key == "vllm-priority")
    assert engine_config(stock, SEED).long_prefill_token_threshold == 0  # vLLM's default: no cap
    capped = engine_config(stock, SEED.with_changes(long_prefill_token_threshold=128))
    assert capped.long_prefill_token_threshold == 128


# Its plan has no window T: the sweep figure must not call legend() on empty axes (a UserWarning in CI).
@pytest.mark.filterwarnings("error::UserWarning")
def test_the_cli_passes_the_scheduling_mode_prefill_cap_and_recogniser_spread_and_prints_the_presets_defaults(
    tmp_path: Path,
) -> None:
    help_text = CliRunner().invoke(app, ["experiment", "colocation", "--help"], terminal_width=200).output
    from flatshare.colocation.setup import SEED

    for option, value in (
        ("--kv-tokens", SEED.kv_tokens),
        ("--cpu-tier-tokens", SEED.cpu_tier_tokens),
        ("--long-prefill-token-threshold", SEED.long_prefill_token_threshold),
    ):
        assert f"[write-up preset: {value}]" in help_text.split(option, 1)[1].split("--", 1)[0]
    assert "--sync-scheduling" in help_text
    out = tmp_path / "exp"
    result = CliRunner().invoke(
        app,
        [
            "experiment",
            "colocation",
            "--out",
            str(out),
            "--callers",
            "1",
            "--agents",
            "2",
            "--seeds",
            "1",
            "--duration",
            "60",
            "--conditions",
            "alone,vllm-priority",
            "--sync-scheduling",
            "--long-prefill-token-threshold",
            "128",
            "--asr-spread",
            "0.37",
        ],
    )
    assert result.exit_code == 0, result.output
    summary = json.loads((out / "summary.json").read_text())
    assert summary["setup"]["async_scheduling"] is False
    assert summary["setup"]["asr_final_spread"] == 0.37 and "asr_final_spread" not in SEED.to_json()
    assert summary["setup"]["long_prefill_token_threshold"] == 128
    facts = [json.loads(p.read_text()) for p in out.glob("runs/**/engine.json")]
    assert facts and all(f["engine_config"]["async_scheduling"] is False for f in facts)
    assert all(f["engine_config"]["long_prefill_token_threshold"] == 128 for f in facts)
    assert all(f["setup"]["asr_final_spread"] == 0.37 for f in facts)


def test_a_kv_cache_smaller_than_the_max_model_length_stops_before_any_run(tmp_path: Path) -> None:
    out = tmp_path / "exp"
    args = ["experiment", "colocation", "--out", str(out), "--quick", "--kv-tokens", "8192"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code != 0
    assert "max_model_len 16384 does not fit the KV cache" in result.output
    assert not (out / "runs").exists()


def test_runs_under_spread_give_every_seed_row_its_range_over_the_near_optimal_set(tmp_path: Path) -> None:
    conditions = tuple(c for c in MAIN_CONDITIONS if c.key in ("alone", "vllm-priority"))
    plan = ColocationPlan(
        callers=(2,), agents=2, seeds=1, duration_s=60.0, drain_s=20.0, conditions=conditions, workers=1
    )
    run_plan(tmp_path, plan)
    other = dataclasses.replace(plan, setup=plan.setup.with_changes(api_latency_s=0.2))
    run_plan(tmp_path / "spread" / "api_latency_s=0.2", other)
    summary = build_report(tmp_path)
    rows = {r.row: r for r in summary.seed_comparison}
    wait = rows["voice alone: mean wait for the first token s"]
    assert wait.flatshare is not None and wait.spread_low == wait.flatshare
    assert (
        wait.spread_high is not None and wait.spread_high > wait.flatshare + 0.1
    )  # the other point's API pass
    assert rows["make-room T=48: voice turn p95 s"].spread_low is None  # a row the runs lack has none
    assert load_summary(tmp_path / "summary.json").seed_comparison == summary.seed_comparison
    assert "spread over the near-optimal set" in (tmp_path / "report.md").read_text()


@pytest.mark.parametrize("key", ["alone", "agents-alone", "make-room-t48"])
def test_every_condition_is_warmed_with_the_voice_system_prompt_alike(key: str) -> None:
    """Under the seed preset the engine has served the voice agent's system prompt once before the window,
    in every condition (agents-alone too, whose workload has no voice turn): the prompt's blocks went to
    the CPU tier. With the setting off, nothing was served."""
    from flatshare.colocation.experiment import build_run
    from flatshare.colocation.setup import SEED

    condition = next(c for c in MAIN_CONDITIONS if c.key == key)
    for warm in (True, False):
        plan = ColocationPlan(
            callers=(2,), agents=2, seeds=1, duration_s=30.0, setup=SEED.with_changes(voice_warmup=warm)
        )
        _, engine, _, _ = build_run(condition, 2, 0, plan)
        assert (engine.now, engine.records) == (0.0, {})
        stored = engine.cpu_tier_counters()["stores"]
        assert (stored > 0) == warm, (warm, engine.cpu_tier_counters())


def test_the_first_voice_turn_is_no_longer_cold() -> None:
    from flatshare.colocation.experiment import build_run
    from flatshare.colocation.setup import SEED
    from flatshare.replay.virtual import run_virtual

    alone = next(c for c in MAIN_CONDITIONS if c.key == "alone")
    first_ttft = {}
    for warm in (True, False):
        plan = ColocationPlan(
            callers=(2,), agents=2, seeds=1, duration_s=60.0, setup=SEED.with_changes(voice_warmup=warm)
        )
        workload, engine, _, _ = build_run(alone, 2, 0, plan)
        run = run_virtual(workload, [engine], until_s=20.0, stop_s=60.0)
        first = min((r for r in run.records if r.cls == "voice"), key=lambda r: r.send_s)
        first_ttft[warm] = first.first_token_s - first.send_s
    assert first_ttft[True] < first_ttft[False] / 2, first_ttft  # 4,000 tokens fewer to prefill


def test_the_shared_workload_is_built_from_a_typed_spec_whose_text_the_run_saves() -> None:
    from flatshare.colocation.experiment import QUICK, workload_spec
    from flatshare.workloads.spec import WorkloadSpec, read_spec

    spec = workload_spec(2, QUICK)
    assert isinstance(spec, WorkloadSpec)
    voice_system = QUICK.setup.voice_system_tokens
    text = f"voice-agents:callers=2,agents={QUICK.agents},duration=300.0,voice_system={voice_system}"
    assert str(spec) == text and read_spec(text) == spec


def test_the_ride_conditions_are_named_and_their_settings_are_valid() -> None:
    picked = pick_conditions("make-room-t48-ride64-waiting,make-room-t48-pinres-tail-hint-ride64")
    assert [c.key for c in picked] == [
        "make-room-t48-pinres-tail-hint-ride64",
        "make-room-t48-ride64-waiting",
    ]
    for condition in RIDE_CONDITIONS:
        assert condition.additional_config is not None
        config = MakeRoomConfig.from_additional_config(condition.additional_config)
        assert config.enabled and config.window_tokens == 48 and config.hold_ride_tokens > 0


def test_the_protected_kv_conditions_set_the_connector_and_are_picked_by_name() -> None:
    """They reach the engine as the connector's extra config (`--kv-transfer-config`'s), and stay out of
    the default plan, whose runs (and so its summary) are unchanged."""
    from flatshare.colocation.experiment import PROTECTED_KV_CONDITIONS, engine_config, pick_conditions
    from flatshare.colocation.setup import SEED

    stacked = pick_conditions("make-room-t48-syncload-tierkeep-tail-hint")[0]
    config = engine_config(stacked, SEED)
    assert config.cpu_tier_connector == {"flatshare_protected": {"sync_load": True, "keep_in_tier": True}}
    assert "pin_share" not in stacked.additional_config["make_room"]  # type: ignore[index]
    assert not {c.key for c in PROTECTED_KV_CONDITIONS} & {c.key for c in ColocationPlan().conditions}
    due = pick_conditions("make-room-t48-syncload-tierkeep-tail-hint-sentence-due550")[0]
    assert due.additional_config["make_room"]["hold_deadline_s"] == 0.55  # type: ignore[index]
    assert engine_config(due, SEED).cpu_tier_connector == config.cpu_tier_connector
    stock = next(c for c in MAIN_CONDITIONS if c.key == "make-room-t48")
    assert "cpu_tier_connector" not in engine_config(stock, SEED).to_json()
