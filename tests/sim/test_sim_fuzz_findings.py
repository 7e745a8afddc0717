"""What the fuzz suite found in `flatshare sim`'s profile reader (issue 16), as plain regression tests: a
profile file with a finite but absurd value ran without end (a step of 1e300 virtual seconds is sampled
every 0.5 s; 1e19 KV tokens are blocks vLLM's pool builds one by one), and fields of the wrong type were
taken. Each is now one line, exit 2, nothing written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from flatshare.cli import app
from flatshare.errors import InputError
from flatshare.sim.profile import load_profile

runner = CliRunner()
SHIPPED = load_profile().to_dict()
REQUEST = '{"id": "a", "arrival_s": 0, "prompt_tokens": 10, "max_tokens": 4, "priority": 0}\n'

PROFILES = [
    pytest.param("step_fixed_s", 1e300, "step_fixed_s must be <=", id="step_fixed_s 1e300 (ran without end)"),
    pytest.param("prefill_attn_pair_s", 1.0, "prefill_attn_pair_s must be <=", id="prefill_attn_pair_s 1"),
    pytest.param(
        "default_kv_tokens",
        10**19,
        "default_kv_tokens must be <=",
        id="default_kv_tokens 1e19 (ran without end)",
    ),
    pytest.param("kv_bytes_per_token", 10**19, "kv_bytes_per_token must be <=", id="kv_bytes_per_token 1e19"),
    pytest.param(
        "cpu_load_bytes_per_s", 1e-300, "cpu_load_bytes_per_s must be >=", id="cpu_load_bytes_per_s 1e-300"
    ),
    pytest.param("api_latency_s", 1e9, "api_latency_s must be <=", id="api_latency_s 1e9"),
    pytest.param("name", ["x"], "name must be printable text", id="name a list (accepted)"),
    pytest.param("name", "a\nb", "name must be printable text", id="name with a newline (two-line error)"),
    pytest.param("sources", 5, "sources must be a list", id="sources a number"),
    pytest.param("sources", [1, 2], "sources must be a list of strings", id="sources numbers (accepted)"),
    pytest.param("fit", 5, "fit must be an object", id="fit a number (accepted)"),
]


@pytest.mark.parametrize(("field", "value", "message"), PROFILES)
def test_absurd_profile_values_are_refused(tmp_path: Path, field: str, value: object, message: str) -> None:
    profile = tmp_path / "p.json"
    profile.write_text(json.dumps({**SHIPPED, field: value}))
    with pytest.raises(InputError, match=message) as caught:
        load_profile(str(profile))
    assert str(profile) in str(caught.value)  # the file is named
    requests, out = tmp_path / "r.jsonl", tmp_path / "out"
    requests.write_text(REQUEST)
    args = ["sim", "--requests", str(requests), "--out", str(out), "--profile", str(profile)]
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output
    assert len(result.output.strip().splitlines()) == 1, result.output
    assert not out.exists()


def test_shipped_profiles_are_within_the_limits() -> None:
    from flatshare.sim.profile import shipped_profiles

    for name in shipped_profiles():
        load_profile(name)


def test_a_request_field_named_with_a_newline_is_a_one_line_error(tmp_path: Path) -> None:
    """`{"\\n": 1}` in a request file gave `field '` and `': unknown field` on two lines."""
    requests, out = tmp_path / "r.jsonl", tmp_path / "out"
    requests.write_text(REQUEST.replace('"priority": 0', '"priority": 0, "\\n": 1'))
    result = runner.invoke(app, ["sim", "--requests", str(requests), "--out", str(out)])
    assert result.exit_code == 2, result.output
    assert len(result.output.strip().splitlines()) == 1, result.output
    assert "field '\\n': unknown field" in result.output
    assert not out.exists()
