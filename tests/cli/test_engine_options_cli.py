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
    assert defaults["kv_tokens"] is None and defaults["make_room"] == "" and defaults["profile"] == ""


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


def _engine_seen(*, own: tuple[str, ...] = ()) -> tuple[typer.Typer, list[EngineOptions]]:
    """A one-command app whose command records the `engine` it was called with."""
    from flatshare.cli.engine_options import with_engine_options

    seen: list[EngineOptions] = []
    probe = typer.Typer()

    @probe.command()
    @with_engine_options(own=own)
    def run(label: str = "x", max_model_len: int = 7, *, engine: EngineOptions) -> None:
        seen.append(engine)
        typer.echo(f"{label} {max_model_len}")

    return probe, seen


def test_every_engine_option_reaches_the_commands_engine() -> None:
    probe, seen = _engine_seen(own=("max_model_len",))
    args = ["--scheduler", "make-room", "--policy", "fcfs", "--profile", "p.json", "--kv-tokens", "4096",
            "--max-num-batched-tokens", "256", "--max-num-seqs", "8", "--max-model-len", "2048",
            "--block-size", "32", "--cpu-tier-tokens", "1024", "--make-room", '{"enabled": true}',
            "--additional-config", "{}", "--label", "y"]  # fmt: skip
    result = runner.invoke(probe, args)
    assert result.exit_code == 0, result.output
    assert result.output.strip() == "y 2048"  # an own option stays the command's
    assert seen == [
        EngineOptions(scheduler="make-room", policy="fcfs", profile="p.json", kv_tokens=4096,
                      max_num_batched_tokens=256, max_num_seqs=8, max_model_len=None, block_size=32,
                      cpu_tier_tokens=1024, make_room='{"enabled": true}', additional_config="{}")
    ]  # fmt: skip


def test_no_engine_option_gives_the_default_engine() -> None:
    probe, seen = _engine_seen(own=("max_model_len",))
    assert runner.invoke(probe, []).exit_code == 0
    assert seen == [EngineOptions()]


def test_a_command_declaring_an_engine_option_itself_is_refused() -> None:
    with pytest.raises(TypeError, match="max_model_len"):
        _engine_seen()


def test_colocation_takes_the_shared_engine_options_from_the_write_up_preset() -> None:
    from flatshare.colocation.setup import SEED

    root: Any = typer.main.get_command(app)
    params = {p.name: p for p in root.commands["experiment"].commands["colocation"].params if p.name}
    sim_params = {p.name: p for p in root.commands["sim"].params if p.name}
    for name in ("profile", "kv_tokens", "max_model_len", "cpu_tier_tokens"):
        option, shared = params[name], sim_params[name]
        assert option.opts == shared.opts and option.default == getattr(SEED, name), name
        assert option.help == f"{shared.help.split(' [')[0].rstrip('.')} [write-up preset: {option.default}]."
    assert not {"scheduler", "policy", "make_room", "additional_config"} & set(params)  # each condition's


def test_colocation_maps_the_engine_options_and_setup_changes_onto_its_setup() -> None:
    from flatshare.colocation.command import SetupChanges, colocation_setup, preset_engine_options
    from flatshare.colocation.setup import SEED

    assert colocation_setup(preset_engine_options(SEED), SetupChanges()) == SEED
    engine = EngineOptions(profile="p.json", kv_tokens=90112, max_model_len=8192, cpu_tier_tokens=0)
    setup = colocation_setup(engine, SetupChanges(admission_rule="full-prompt", scale=0.5))
    assert (setup.profile, setup.kv_tokens, setup.max_model_len, setup.cpu_tier_tokens) == (
        "p.json",
        90112,
        8192,
        0,
    )
    assert (
        setup.reserve_full_isl
        and setup.scale == 0.5
        and setup.voice_system_tokens == SEED.voice_system_tokens
    )
    with pytest.raises(ValueError, match="--admission-rule must be full-prompt or first-chunk"):
        colocation_setup(engine, SetupChanges(admission_rule="fifo"))


def test_quick_takes_the_callers_seeds_and_agents_given_beside_it() -> None:
    """`--quick --callers 4,6` ran 2 callers: the quick plan silently dropped the options given with it."""
    from flatshare.colocation.command import colocation_plan
    from flatshare.colocation.experiment import QUICK, ColocationPlan
    from flatshare.colocation.setup import SEED

    def plan(**given: Any) -> ColocationPlan:
        options = {"callers": None, "agents": None, "seeds": None, "duration": None, "drain": None} | given
        return colocation_plan(SEED, quick=True, real=False, workers=1, conditions="alone", **options)

    quick = plan()
    assert (quick.callers, quick.seeds, quick.agents, quick.duration_s) == (
        QUICK.callers,
        QUICK.seeds,
        QUICK.agents,
        QUICK.duration_s,
    )
    changed = plan(callers="4,6", seeds=3, agents=12)
    assert (changed.callers, changed.seeds, changed.agents) == ((4, 6), 3, 12)
    assert changed.duration_s == QUICK.duration_s
    for bad in ("2,x", "0", "4,,6", "-2"):
        with pytest.raises(ValueError, match="--callers"):
            plan(callers=bad)
