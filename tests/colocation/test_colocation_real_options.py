"""`experiment colocation`'s real-engine and scale options, checked before anything runs (no server)."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from flatshare.cli import app

BASE = ["experiment", "colocation", "--quick"]


@pytest.mark.parametrize(
    ("extra", "words"),
    [
        (["--scale", "0"], "scale must be a number in (0, 1]"),
        (["--admission-rule", "fifo"], "--admission-rule must be full-prompt or first-chunk, got 'fifo'"),
        (["--admission", "fifo"], "--admission-rule must be full-prompt or first-chunk, got 'fifo'"),
        (["--admission", "first-chunk", "--admission-rule", "full-prompt"], "disagree"),
        (["--scale", "1.5"], "scale must be a number in (0, 1]"),
        (["--engine", "vllm"], "--engine vllm needs --model"),
        (["--engine", "gpu"], "--engine must be sim or vllm"),
        (["--model", "m"], "--model, --vllm-arg and --dry-run go with --engine vllm"),
        (["--engine", "vllm", "--model", "m", "--device", "tpu"], "--device must be cpu, gpu or auto"),
        (
            ["--engine", "vllm", "--model", "m", "--asr-spread", "0.37"],
            "--asr-spread goes with the simulated",
        ),
        (["--asr-spread", "3"], "asr_final_spread must be in [0, 2]"),
    ],
)
def test_bad_options_stop_before_any_run(tmp_path: Path, extra: list[str], words: str) -> None:
    out = tmp_path / "exp"
    result = CliRunner().invoke(app, [*BASE, "--out", str(out), *extra])
    assert result.exit_code == 2
    assert words in " ".join(result.output.split())
    assert not out.exists()


def test_the_cpu_preset_dry_run_names_its_servers(tmp_path: Path) -> None:
    out = tmp_path / "exp"
    args = [*BASE, "--out", str(out), "--engine", "vllm", "--model", "tiny", "--device", "cpu", "--dry-run"]
    result = CliRunner().invoke(app, args, terminal_width=400)
    assert result.exit_code == 0, result.output
    assert "conditions vllm-priority, make-room-t48" in result.output and "scale 0.05" in result.output
    servers = [line for line in result.output.splitlines() if line.startswith("server ")]
    assert len(servers) == 2
    for line in servers:
        assert "--enforce-eager" in line and "--block-size 32" in line and "--no-async-scheduling" in line
        assert "--max-model-len 819" in line and "--num-gpu-blocks-override 70" in line
        assert "kv-offloading" not in line
    assert not out.exists()


def test_a_gateway_side_baseline_dry_run_names_its_engine_and_the_gateway_in_front(tmp_path: Path) -> None:
    out = tmp_path / "exp"
    args = [*BASE, "--out", str(out), "--engine", "vllm", "--model", "tiny", "--device", "cpu", "--dry-run"]
    result = CliRunner().invoke(app, [*args, "--conditions", "vllm-priority,agent-cap"], terminal_width=400)
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    servers = [line for line in lines if line.startswith("server ")]
    gateways = [line for line in lines if line.startswith("gateway ")]
    assert [line.split(":")[0] for line in servers] == ["server vllm-priority", "server agent-cap"]
    assert servers[0].split(":", 1)[1] == servers[1].split(":", 1)[1]  # the baseline's engine is stock
    assert len(gateways) == 1 and gateways[0].startswith("gateway agent-cap: ")
    assert (
        "python -m flatshare.cli gateway --config gateway.json --backend http://127.0.0.1:$PORT"
        in gateways[0]
    )
    assert '"baseline": "agent-cap", "baseline_settings": {"max_agents_per_backend": 4}' in gateways[0]
    assert not out.exists()


def test_real_runs_ask_ray_for_a_gpu_each_or_two_cores() -> None:
    pytest.importorskip("ray")
    from flatshare.colocation.servers import real_engine
    from flatshare.lab.executors import make_executor

    gpu, cpu = real_engine("m", "gpu"), real_engine("m", "cpu")
    assert gpu.ray_resources() == {"num_gpus": 1, "num_cpus": 1}
    assert cpu.ray_resources() == {"num_cpus": 2}
    assert make_executor("ray", resources=gpu.ray_resources()).resources == {"num_gpus": 1, "num_cpus": 1}  # type: ignore[attr-defined]


def test_scale_shrinks_the_engines_token_capacities_and_keeps_its_step_budget() -> None:
    from flatshare.colocation.experiment import MAIN_CONDITIONS, engine_config
    from flatshare.colocation.setup import SEED

    stock = next(c for c in MAIN_CONDITIONS if c.key == "vllm-priority")
    full, small = engine_config(stock, SEED), engine_config(stock, SEED.with_changes(scale=0.05))
    assert (small.max_model_len, small.kv_tokens, small.cpu_tier_tokens) == (819, 2253, 3277)
    assert small.max_num_batched_tokens == full.max_num_batched_tokens
    with pytest.raises(ValueError, match="scale"):
        SEED.with_changes(scale=0.0)


def test_the_admission_rules_old_spelling_still_works_and_is_hidden() -> None:
    from flatshare.cli.colocation import _one_rule

    help_text = CliRunner().invoke(app, ["experiment", "colocation", "--help"], terminal_width=200).output
    assert "--admission-rule" in help_text and "--admission " not in help_text
    assert _one_rule(None, "full-prompt") == _one_rule("full-prompt", None) == "full-prompt"
    assert _one_rule("first-chunk", "first-chunk") == "first-chunk" and _one_rule(None, None) is None
