"""The `flatshare` CLI: help without vLLM, `sim` outputs, and one-line errors with exit code 2."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from flatshare.cli import app
from flatshare.runfiles.records import schema_problems

runner = CliRunner()


def _write(path: Path, rows: list[dict[str, object]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


GOOD = [
    {"id": "a", "arrival_s": 0, "prompt_tokens": 3000, "max_tokens": 20, "priority": 10, "prefix_group": "g"},
    {
        "id": "b",
        "arrival_s": 0.5,
        "prompt_tokens": 3100,
        "max_tokens": 20,
        "priority": 10,
        "prefix_group": "g",
    },
    {"id": "v", "arrival_s": 1.0, "prompt_tokens": 200, "max_tokens": 10, "priority": 0, "cls": "voice"},
]


def test_help_lists_subcommands_without_importing_vllm() -> None:
    code = (
        "import sys\n"
        "from typer.testing import CliRunner\n"
        "from flatshare.cli import app\n"
        "r = CliRunner().invoke(app, ['--help'])\n"
        "assert r.exit_code == 0, r.output\n"
        "assert 'sim' in r.output\n"
        "r = CliRunner().invoke(app, ['sim', '--help'])\n"
        "assert '--scheduler' in r.output\n"
        "assert 'vllm' not in sys.modules and 'torch' not in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


@pytest.mark.vllm
def test_sim_writes_records_samples_and_summary_byte_identically(tmp_path: Path) -> None:
    requests = _write(tmp_path / "r.jsonl", GOOD)
    outputs = []
    for name in ("one", "two"):
        result = runner.invoke(app, ["sim", "--requests", str(requests), "--out", str(tmp_path / name)])
        assert result.exit_code == 0, result.output
        outputs.append(
            {
                f: (tmp_path / name / f).read_bytes()
                for f in ("requests.jsonl", "samples.jsonl", "summary.json")
            }
        )
    assert outputs[0] == outputs[1]
    records = [json.loads(line) for line in outputs[0]["requests.jsonl"].splitlines()]
    assert {r["id"] for r in records} == {"a", "b", "v"}
    for record in records:
        assert schema_problems(record) == [], record["id"]
        assert record["status"] == "ok" and record["engine"] == "sim0"
        assert len(record["token_times_s"]) == record["max_tokens"]
        assert record["first_token_s"] > record["send_s"] and record["end_s"] >= record["send_s"]
    summary = json.loads(outputs[0]["summary.json"])
    assert summary["classes"]["voice"]["requests"] == 1


BAD = [
    ({"arrival_s": 0, "prompt_tokens": 10, "max_tokens": 5, "priority": 0}, "field 'id': missing"),
    (
        {"id": "x", "arrival_s": 0, "prompt_tokens": -3, "max_tokens": 5, "priority": 0},
        "field 'prompt_tokens'",
    ),
    ({"id": "x", "arrival_s": 0, "prompt_tokens": 10, "max_tokens": 0, "priority": 0}, "field 'max_tokens'"),
    ({"id": "x", "arrival_s": -1, "prompt_tokens": 10, "max_tokens": 5, "priority": 0}, "field 'arrival_s'"),
    ({"id": "x", "arrival_s": 0, "prompt_tokens": 10, "max_tokens": 5, "priority": "hi"}, "field 'priority'"),
    (
        {"id": "x", "arrival_s": 0, "prompt_tokens": 40000, "max_tokens": 5, "priority": 0},
        "exceeds max_model_len",
    ),
    (
        {"id": "x", "arrival_s": 0, "prompt_tokens": 10, "max_tokens": 5, "priority": 0, "colour": 1},
        "'colour'",
    ),
]


@pytest.mark.parametrize(("record", "message"), BAD)
def test_bad_request_lines_name_line_and_field(
    tmp_path: Path, record: dict[str, object], message: str
) -> None:
    requests = _write(tmp_path / "r.jsonl", [GOOD[0], record])
    out = tmp_path / "out"
    result = runner.invoke(app, ["sim", "--requests", str(requests), "--out", str(out)])
    assert result.exit_code == 2
    assert "r.jsonl:2: " in result.output and message in result.output
    assert len(result.output.strip().splitlines()) == 1
    assert not out.exists()


def test_invalid_json_line_is_named(tmp_path: Path) -> None:
    requests = tmp_path / "r.jsonl"
    requests.write_text(json.dumps(GOOD[0]) + "\n{not json\n")
    result = runner.invoke(app, ["sim", "--requests", str(requests), "--out", str(tmp_path / "o")])
    assert result.exit_code == 2
    assert "r.jsonl:2: not valid JSON" in result.output


@pytest.mark.vllm
def test_unknown_scheduler_path_is_a_clear_error(tmp_path: Path) -> None:
    requests = _write(tmp_path / "r.jsonl", GOOD)
    out = tmp_path / "out"
    for path, message in (("no.such.Sched", "cannot import"), ("json.JSONDecoder", "not a subclass")):
        result = runner.invoke(
            app, ["sim", "--requests", str(requests), "--out", str(out), "--scheduler", path]
        )
        assert result.exit_code == 2, result.output
        assert message in result.output
    assert not out.exists()


def test_bad_engine_settings_are_rejected(tmp_path: Path) -> None:
    requests = _write(tmp_path / "r.jsonl", GOOD)
    result = runner.invoke(
        app, ["sim", "--requests", str(requests), "--out", str(tmp_path / "o"), "--policy", "lifo"]
    )
    assert result.exit_code == 2
    assert "policy must be one of" in result.output
