"""Files and options that once crashed or hung `flatshare sim` (issue 16): each is now one line on stderr,
exit 2, and nothing written; and the JSON reader's limits hold for any input (hypothesis)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from flatshare import jsonin
from flatshare.cli import app
from flatshare.errors import InputError
from flatshare.sim.profile import load_profile

runner = CliRunner()
GOOD = '{"id": "a", "arrival_s": 0, "prompt_tokens": 10, "max_tokens": 4, "priority": 0}'


def _line(**fields: object) -> str:
    return json.dumps({**json.loads(GOOD), **fields})


HOSTILE = [
    # (what the request file holds, what the one error line says)
    pytest.param(
        _line(prompt_tokens=10**9).encode(), "room for", id="a billion prompt tokens (10 GB of ids)"
    ),
    pytest.param(GOOD.replace('"arrival_s": 0', '"arrival_s": Infinity').encode(), "Infinity", id="Infinity"),
    pytest.param(_line(arrival_s=1e300).encode(), "arrival_s", id="arrival 1e300 (ran without end)"),
    pytest.param(GOOD.replace("10,", "1" + "0" * 30 + ",").encode(), "31 digits", id="prompt_tokens 10**30"),
    pytest.param(GOOD.replace("10,", "9" * 5000 + ",").encode(), "5000 digits", id="a 5,000-digit integer"),
    pytest.param(b"\xff\xfe" + GOOD.encode(), "not UTF-8", id="not UTF-8"),
    pytest.param(("[" * 1000 + "]" * 1000).encode(), "nested", id="nested 1,000 deep"),
    pytest.param(GOOD.replace('"arrival_s": 0', '"arrival_s": 1e400').encode(), "out of range", id="1e400"),
]


@pytest.mark.parametrize(("content", "message"), HOSTILE)
def test_a_hostile_request_file_is_one_line_exit_2_nothing_written(
    tmp_path: Path, content: bytes, message: str
) -> None:
    requests = tmp_path / "r.jsonl"
    requests.write_bytes(content + b"\n")
    out = tmp_path / "out"
    result = runner.invoke(app, ["sim", "--requests", str(requests), "--out", str(out)])
    assert result.exit_code == 2, result.output
    assert len(result.output.strip().splitlines()) == 1, result.output
    assert "r.jsonl" in result.output and message in result.output
    assert not out.exists()


def test_out_naming_an_existing_file_is_refused_before_the_run(tmp_path: Path) -> None:
    requests = tmp_path / "r.jsonl"
    requests.write_text(GOOD + "\n")
    result = runner.invoke(app, ["sim", "--requests", str(requests), "--out", str(requests)])
    assert result.exit_code == 2, result.output
    assert result.output.strip() == f"error: --out {requests}: exists and is not a folder"
    assert requests.read_text() == GOOD + "\n"


@pytest.mark.parametrize(
    "option",
    ["--kv-tokens", "--cpu-tier-tokens", "--max-num-seqs", "--max-num-batched-tokens", "--max-model-len"],
)
def test_an_engine_size_past_any_real_engine_is_refused_before_the_engine_is_built(
    tmp_path: Path, option: str
) -> None:
    """`--kv-tokens 10**19` once never finished starting (vLLM makes an object per KV block)."""
    requests = tmp_path / "r.jsonl"
    requests.write_text(GOOD + "\n")
    out = tmp_path / "out"
    result = runner.invoke(app, ["sim", "--requests", str(requests), "--out", str(out), option, str(10**19)])
    assert result.exit_code == 2, result.output
    assert len(result.output.strip().splitlines()) == 1, result.output
    assert f"{option[2:].replace('-', '_')} must be at most" in result.output
    assert not out.exists()


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("prefill_token_s", "fast", "prefill_token_s must be a finite number, got 'fast'"),
        ("default_kv_tokens", 1.5, "default_kv_tokens must be an integer"),
        ("step_fixed_s", None, "step_fixed_s must be a finite number"),
    ],
)
def test_a_bad_profile_file_names_the_file_and_the_field(
    tmp_path: Path, field: str, value: object, message: str
) -> None:
    data = load_profile().to_dict() | {field: value}
    path = tmp_path / "mine.json"
    path.write_text(json.dumps(data))
    with pytest.raises(InputError, match=message) as caught:
        load_profile(str(path))
    assert str(caught.value).startswith(f"{path}: ")


def test_nan_in_a_profile_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "nan.json"
    path.write_text(json.dumps(load_profile().to_dict() | {"decode_token_s": float("nan")}))
    with pytest.raises(InputError, match=f"{path}: NaN is not a JSON number"):
        load_profile(str(path))


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4),
    max_leaves=30,
)


@settings(max_examples=300, deadline=None)
@given(st.one_of(JSON.map(lambda v: json.dumps(v)), st.text(max_size=200), st.binary(max_size=200)))
def test_the_json_reader_returns_a_value_within_limits_or_an_input_error(text: str | bytes) -> None:
    try:
        value = jsonin.loads(text, "x")
    except InputError as exc:
        assert str(exc).startswith("x: ")
        return
    assert jsonin._depth(value) <= jsonin.MAX_DEPTH
    for number in _numbers(value):
        assert number == number and abs(number) != float("inf")
        if isinstance(number, int):
            assert len(str(abs(number))) <= jsonin.MAX_INT_DIGITS


def _numbers(value: object) -> list[float]:
    if isinstance(value, dict):
        return [n for v in value.values() for n in _numbers(v)]
    if isinstance(value, list):
        return [n for v in value for n in _numbers(v)]
    return [value] if isinstance(value, int | float) and not isinstance(value, bool) else []
