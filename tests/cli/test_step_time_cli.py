"""`flatshare step-time`: a step's time and parts under any profile; bad input is one line and exit 2."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from flatshare.cli import app
from flatshare.sim.profile import ScheduledWork, load_profile, shipped_profiles

runner = CliRunner()


@pytest.mark.parametrize("name", shipped_profiles())
def test_json_gives_the_total_and_its_parts_for_every_profile(name: str) -> None:
    result = runner.invoke(app, ["step-time", "--profile", name, "--prefill", "512@0", "--json"])
    assert result.exit_code == 0, result.output
    body = json.loads(result.stdout)
    parts = body["parts"]
    assert parts["linear_s"] > 0 and parts["fixed_s"] > 0 and parts["attention_s"] >= 0
    assert body["total_s"] == pytest.approx(parts["linear_s"] + parts["attention_s"] + parts["fixed_s"])
    assert body["total_s"] == pytest.approx(load_profile(name).step_time([ScheduledWork(512, 0, False)]))


def test_decodes_add_their_context_reads() -> None:
    args = ["step-time", "--profile", "a100-llama3-8b", "--prefill", "64@4000", "--json"]
    alone = json.loads(runner.invoke(app, args).stdout)
    beside = json.loads(runner.invoke(app, [*args, "--decode", "24x12000"]).stdout)
    profile = load_profile("a100-llama3-8b")
    assert beside["parts"]["decode_attention_s"] == pytest.approx(24 * 12000 * profile.decode_ctx_token_s)
    assert beside["tokens"] == 88 and alone["tokens"] == 64


def test_the_default_24gb_profile_prices_a_512_chunk_beside_decodes_at_55_to_70_ms() -> None:
    result = runner.invoke(app, ["step-time", "--prefill", "512@0", "--decode", "3x250", "--json"])
    assert 0.055 <= json.loads(result.stdout)["total_s"] <= 0.070


def test_text_output_names_the_parts() -> None:
    result = runner.invoke(app, ["step-time", "--profile", "llama3-8b-24gb-roofline", "--decode", "1x300"])
    assert result.exit_code == 0
    assert "roofline" in result.stdout and "linear" in result.stdout and "fixed" in result.stdout


@pytest.mark.parametrize(
    "args",
    [
        ["--decode", "3y4"],
        ["--prefill", "64"],
        ["--decode", "0x100"],
        ["--prefill", "99999999999@0"],
        ["--profile", "no-such-profile", "--decode", "1x1"],
        [],
    ],
)
def test_bad_input_is_one_line_and_exit_2(args: list[str]) -> None:
    result = runner.invoke(app, ["step-time", *args])
    assert result.exit_code == 2
    assert result.output.count("\n") == 1 and result.output.startswith("error: ")
