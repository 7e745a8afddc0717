"""Engine settings are defined once: every command's engine options default to `EngineConfig`'s
fields, the gateway's commands are written like the others, and nothing below the CLI imports it."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from flatshare.cli import app
from flatshare.sim.config import DEFAULT_ENGINE
from flatshare.sim.options import EngineOptions

runner = CliRunner()

ENGINE_FIELDS = (
    "scheduler",
    "policy",
    "max_num_batched_tokens",
    "max_num_seqs",
    "block_size",
    "cpu_tier_tokens",
)


def _defaults(command_name: str) -> dict[str, object]:
    """The parsed default of each option of `flatshare COMMAND`, by parameter name."""
    root: Any = typer.main.get_command(app)
    return {p.name: p.default for p in root.commands[command_name].params if p.name}


@pytest.mark.parametrize("command", ["sim", "serve-sim", "replay"])
def test_engine_options_default_to_the_engine_configs_fields(command: str) -> None:
    defaults = _defaults(command)
    for name in ENGINE_FIELDS:
        assert defaults[name] == getattr(DEFAULT_ENGINE, name), name
    assert defaults["kv_tokens"] == 0 and defaults["make_room"] == "" and defaults["profile"] == ""


def test_fidelity_options_default_to_the_engine_configs_fields() -> None:
    for command in ("fidelity", "calibrate-engine"):
        assert _defaults(command)["max_num_batched_tokens"] == DEFAULT_ENGINE.max_num_batched_tokens
    defaults = _defaults("fidelity")
    assert defaults["max_num_seqs"] == DEFAULT_ENGINE.max_num_seqs
    assert defaults["policy"] == DEFAULT_ENGINE.policy and defaults["scheduler"] == DEFAULT_ENGINE.scheduler


def test_options_with_nothing_left_at_zero_build_the_default_config() -> None:
    config, profile = EngineOptions(kv_tokens=DEFAULT_ENGINE.kv_tokens, max_model_len=32768).build()
    assert config == DEFAULT_ENGINE
    assert profile.name


GATEWAY_OPTIONS = ("--backend", "--port", "--host", "--policy", "--config", "--audit-log", "--admin-token")


def test_gateway_help_lists_its_options_in_both_entry_points() -> None:
    result = runner.invoke(app, ["gateway", "--help"])
    assert result.exit_code == 0, result.output
    assert all(option in result.output for option in GATEWAY_OPTIONS)
    alone = subprocess.run(
        [sys.executable, "-m", "flatshare.gateway", "--help"], capture_output=True, text=True, timeout=120
    )
    assert alone.returncode == 0, alone.stderr
    assert (
        "gateway" in alone.stdout
        and "calibrate-thresholds" in alone.stdout
        and "serve-sim" not in alone.stdout
    )


def test_the_packages_do_not_import_the_cli() -> None:
    code = (
        "import sys\n"
        "import flatshare.replay.command, flatshare.sim.command, flatshare.gateway.command\n"
        "import flatshare.fidelity.command\n"
        "assert not any(m == 'flatshare.cli' or m.startswith('flatshare.cli.') for m in sys.modules)\n"
        "assert 'vllm' not in sys.modules, 'vllm imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
