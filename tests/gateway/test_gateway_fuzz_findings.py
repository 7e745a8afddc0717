"""What the fuzz suite found in the gateway's file readers (issue 16), each as a plain regression test: a
config file or a calibration run that gave a traceback, was read as something it is not, or gave an error
message of two lines. Each is now one `InputError` line (the CLI's exit 2)."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from flatshare.cli import app
from flatshare.errors import InputError
from flatshare.gateway.calibrate_inputs import load_samples
from flatshare.gateway.configfile import load_config

BACKEND = '[[backends]]\nurl = "http://127.0.0.1:8001"\n'
runner = CliRunner()

CONFIGS = [
    # (TOML, what the error says)
    pytest.param(
        "port = " + "9" * 5000 + "\n" + BACKEND, "4300 digits", id="a 5,000-digit integer (ValueError)"
    ),
    pytest.param(
        "x = " + "[" * 3000 + "]" * 3000 + "\n" + BACKEND, "nested", id="arrays 3,000 deep (RecursionError)"
    ),
    pytest.param("port = 123456789012345678901\n" + BACKEND, "digits", id="a 21-digit integer"),
    pytest.param("upstream_timeout_s = inf\n" + BACKEND, "finite", id="upstream_timeout_s = inf (accepted)"),
    pytest.param("drain_timeout_s = nan\n" + BACKEND, "out of range", id="drain_timeout_s = nan"),
    pytest.param(
        BACKEND + '[classes]\n"agent\\n" = 10\n', "class name", id="class name with a newline (accepted)"
    ),
    pytest.param(
        BACKEND + '[[tenants]]\nname = "voice\\n"\napi_keys = ["sk-0123456789"]\n',
        "tenant name",
        id="tenant name with a newline (accepted)",
    ),
    pytest.param(BACKEND + '[classes]\n"a\\nb" = 1.5\n', '"a\\nb"', id="a key with a newline in the message"),
]


@pytest.mark.parametrize(("toml", "message"), CONFIGS)
def test_hostile_config_files_are_one_line_input_errors(tmp_path: Path, toml: str, message: str) -> None:
    path = tmp_path / "gw.toml"
    path.write_text(toml)
    with pytest.raises(InputError) as caught:
        load_config(path)
    text = str(caught.value)
    assert "\n" not in text and message in text, text
    result = runner.invoke(app, ["gateway", "--config", str(path)])
    assert result.exit_code == 2, result.output
    assert len(result.output.strip().splitlines()) == 1, result.output


RUNS = [
    pytest.param(b"\xff\xfe{}\n", "not UTF-8", id="not UTF-8 (UnicodeDecodeError)"),
    pytest.param(b"[" * 2000 + b"]" * 2000 + b"\n", "nested", id="nested 2,000 deep (RecursionError)"),
    pytest.param(b'{"t": ' + b"9" * 5000 + b', "kv_usage": 0.5}\n', "digits", id="a 5,000-digit integer"),
    pytest.param(b'{"t": "nan", "kv_usage": 0.25}\n', "finite", id="t as the string nan (read as NaN)"),
    pytest.param(b'{"t": 1.0, "kv_usage": "inf"}\n', "finite", id="kv_usage as the string inf"),
    pytest.param(b'{"t": NaN, "kv_usage": 0.25}\n', "NaN", id="t NaN"),
    pytest.param(
        b'{"t": "1e999", "request_id": "r", "input_tokens": 100, "backends": [], "attempt": 1}\n',
        "finite",
        id="an audit line's t as a string",
    ),
]


@pytest.mark.parametrize(("content", "message"), RUNS)
def test_hostile_calibration_runs_are_one_line_input_errors(
    tmp_path: Path, content: bytes, message: str
) -> None:
    path = tmp_path / "audit.jsonl"
    path.write_bytes(content)
    with pytest.raises(InputError) as caught:
        load_samples([path])
    text = str(caught.value)
    assert "\n" not in text and message in text, text
    result = runner.invoke(app, ["calibrate-thresholds", str(path)])
    assert result.exit_code == 2, result.output
    assert len(result.output.strip().splitlines()) == 1, result.output
