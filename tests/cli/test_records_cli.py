"""One record format from every writer, and `flatshare records upgrade` for old files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from flatshare.cli import app
from flatshare.runfiles.records import RECORD_VERSION, read_records, schema_problems

runner = CliRunner()

REQUESTS = [
    {"id": "a", "arrival_s": 0, "prompt_tokens": 600, "max_tokens": 8, "priority": 10, "cls": "agent"},
    {"id": "v", "arrival_s": 0.2, "prompt_tokens": 200, "max_tokens": 5, "priority": 0, "cls": "voice"},
]
SPEC = "long-short:long=600,shorts=2"
OLD_SIM = {
    "arrival_s": 0.0,
    "cls": "",
    "finish_reason": "length",
    "finish_s": 0.2,
    "first_scheduled_s": 0.0,
    "id": "a",
    "max_tokens": 2,
    "output_tokens": 2,
    "preemptions": 0,
    "priority": 10,
    "prompt_tokens": 300,
    "status": "finished",
    "token_times_s": [0.1, 0.2],
    "ttft_s": 0.1,
    "wait_s": {"prefill": 0.1},
}


def _lines(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.vllm
def test_flatshare_sim_and_replay_sim_write_the_same_record_fields(tmp_path: Path) -> None:
    requests = tmp_path / "requests.jsonl"
    requests.write_text("".join(json.dumps(r) + "\n" for r in REQUESTS))
    sim = runner.invoke(app, ["sim", "--requests", str(requests), "--out", str(tmp_path / "a")])
    assert sim.exit_code == 0, sim.output
    replay = runner.invoke(app, ["replay", "--workload", SPEC, "--sim", "--out", str(tmp_path / "b")])
    assert replay.exit_code == 0, replay.output
    a, b = _lines(tmp_path / "a" / "requests.jsonl"), _lines(tmp_path / "b" / "requests.jsonl")
    assert len(a) == 2 and len(b) == 3
    assert {frozenset(r) for r in a} == {frozenset(r) for r in b}  # one key set, the same in both
    for row in a + b:
        assert schema_problems(row) == [], row["id"]
        assert row["version"] == RECORD_VERSION and row["status"] == "ok" and row["engine"] == "sim0"
        assert row["first_scheduled_s"] is not None and row["wait_s"] is not None
    assert {r["id"]: r["session_id"] for r in a} == {"a": "a", "v": "v"}
    assert all(isinstance(r["preemptions"], int) for r in a)
    summary = json.loads((tmp_path / "a" / "summary.json").read_text())
    assert summary["record_version"] == RECORD_VERSION and summary["classes"]["voice"]["finished"] == 1
    samples = _lines(tmp_path / "a" / "samples.jsonl")
    assert samples and {frozenset(s) for s in samples} == {
        frozenset(s) for s in _lines(tmp_path / "b" / "samples.jsonl")
    }


def test_records_upgrade_writes_the_current_format(tmp_path: Path) -> None:
    old = tmp_path / "old.jsonl"
    old.write_text(json.dumps(OLD_SIM) + "\n")
    result = runner.invoke(app, ["records", "upgrade", str(old), str(tmp_path / "new.jsonl")])
    assert result.exit_code == 0, result.output
    assert f"wrote 1 records of version {RECORD_VERSION}" in result.output and "1 of sim-1" in result.output
    [record] = read_records(tmp_path / "new.jsonl")
    assert (record.send_s, record.end_s, record.status, record.session_id) == (0.0, 0.2, "ok", "a")


@pytest.mark.parametrize(
    ("content", "target", "message"),
    [
        ("{not json\n", "new.jsonl", "old.jsonl:1: not valid JSON"),
        (json.dumps({**OLD_SIM, "priority": "high"}) + "\n", "new.jsonl", "old.jsonl:1: field 'priority'"),
        (json.dumps(OLD_SIM) + "\n", "old.jsonl", "is the input file"),
        (json.dumps(OLD_SIM) + "\n", ".", "is a folder"),
        (None, "new.jsonl", "old.jsonl: cannot read"),
    ],
)
def test_records_upgrade_refuses_bad_input_in_one_line(
    tmp_path: Path, content: str | None, target: str, message: str
) -> None:
    old = tmp_path / "old.jsonl"
    if content is not None:
        old.write_text(content)
    result = runner.invoke(app, ["records", "upgrade", str(old), str(tmp_path / target)])
    assert result.exit_code == 2, result.output
    assert result.output.startswith("error: ") and message in result.output
    assert len(result.output.strip().splitlines()) == 1
    assert not (tmp_path / "new.jsonl").exists()
    if content is not None:
        assert old.read_text() == content


# -- hostile inputs (issue 32, item 11) -------------------------------------------------------------------
def test_upgrade_of_an_endless_file_is_a_bounded_one_line_error(tmp_path: Path) -> None:
    from kit.files import refused

    refused(runner.invoke(app, ["records", "upgrade", "/dev/zero", str(tmp_path / "out.jsonl")]), "/dev/zero")
    assert not (tmp_path / "out.jsonl").exists()


def test_upgrade_never_writes_through_a_planted_temporary_name(tmp_path: Path) -> None:
    from kit.files import plant, untouched

    source, target = tmp_path / "old.jsonl", tmp_path / "out" / "new.jsonl"
    source.write_text(json.dumps(OLD_SIM) + "\n")
    victim = tmp_path / "elsewhere" / "victim.txt"
    link = plant(target.parent / f".{target.name}.tmp", victim)
    plant(target, tmp_path / "elsewhere" / "victim2.txt")
    result = runner.invoke(app, ["records", "upgrade", str(source), str(target)])
    assert result.exit_code == 0, result.output
    untouched(victim)
    untouched(tmp_path / "elsewhere" / "victim2.txt", target)
    assert link.is_symlink()  # left alone: the temporary file has a name of its own
    assert [r.id for r in read_records(target)] == ["a"]
