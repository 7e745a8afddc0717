"""Old record files (either kind of version 1) are refused by the reader and upgraded by the converter."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from flatshare.errors import InputError
from flatshare.runfiles.records import RECORD_VERSION, ReplayRecord, read_records, schema_problems
from flatshare.runfiles.upgrade import upgrade_file, upgrade_row

# A line `flatshare sim` wrote before version 2 (times shortened).
SIM_V1 = {
    "arrival_s": 0.5,
    "cls": "voice",
    "finish_reason": "length",
    "finish_s": 0.9,
    "first_scheduled_s": 0.5,
    "id": "v",
    "max_tokens": 3,
    "output_tokens": 3,
    "preemptions": 1,
    "priority": 0,
    "prompt_tokens": 200,
    "status": "finished",
    "token_times_s": [0.6, 0.8, 0.9],
    "ttft_s": 0.1,
    "wait_s": {"prefill": 0.1000000004, "seats": 0.0},
}


def replay_v1() -> dict[str, object]:
    """A line of the replay's version 1 (the wall-clock driver: no simulator fields)."""
    record = ReplayRecord("s/0", "s", "chat", 5, 100, 2, "http://h:8000", 1.0, 4, [1.5, 1.75], 1.75, "length")
    data = record.to_json()
    del data["preemptions"], data["first_scheduled_s"], data["wait_s"]
    return {**data, "version": 1}


def _jsonl(path: Path, rows: list[dict[str, object]]) -> Path:
    path.write_text("".join(json.dumps(row, sort_keys=True) + "\n" for row in rows))
    return path


@pytest.mark.parametrize(
    ("row", "field"), [(SIM_V1, "arrival_s"), (replay_v1(), "version")], ids=["sim-1", "replay-1"]
)
def test_the_reader_refuses_an_old_file_in_one_line_naming_the_field_and_the_converter(
    tmp_path: Path, row: dict[str, object], field: str
) -> None:
    path = _jsonl(tmp_path / "requests.jsonl", [row])
    with pytest.raises(InputError) as caught:
        read_records(path)
    message = str(caught.value)
    assert message.startswith(f"{path}:1: field '{field}': ")
    assert "flatshare records upgrade IN OUT" in message and "\n" not in message
    assert schema_problems(row) == [message.removeprefix(f"{path}:1: ")]


def test_a_sim_record_of_version_1_becomes_what_flatshare_sim_writes_now() -> None:
    kind, record = upgrade_row(dict(SIM_V1), "x:1")
    assert kind == "sim-1"
    data = record.to_json()
    assert schema_problems(data) == []
    assert data == {
        "version": RECORD_VERSION,
        "id": "v",
        "session_id": "v",
        "cls": "voice",
        "priority": 0,
        "prompt_tokens": 200,
        "max_tokens": 3,
        "first_sentence_tokens": None,
        "engine": "sim0",
        "send_s": 0.5,
        "token_times_s": [0.6, 0.8, 0.9],
        "output_tokens": 3,
        "first_token_s": 0.6,
        "first_sentence_s": None,
        "end_s": 0.9,
        "finish_reason": "length",
        "status": "ok",
        "error": None,
        "first_scheduled_s": 0.5,
        "wait_s": {"prefill": 0.1, "seats": 0.0},
        "preemptions": 1,
    }


def test_a_replay_record_of_version_1_changes_only_its_version_and_gains_null_simulator_fields() -> None:
    old = replay_v1()
    kind, record = upgrade_row(dict(old), "x:1")
    assert kind == "replay-1"
    new = record.to_json()
    assert new == {
        **old,
        "version": RECORD_VERSION,
        "first_scheduled_s": None,
        "wait_s": None,
        "preemptions": None,
    }


def test_a_current_record_is_kept_and_a_broken_one_is_named() -> None:
    current = ReplayRecord("a", "a", "chat", 0, 10, 1, "sim0", 0.0, None, [0.5], 0.5, "length", preemptions=0)
    assert upgrade_row(current.to_json(), "x:1") == ("2", current)
    with pytest.raises(InputError, match=r"x:3: field 'token_times_s': missing \(an old `flatshare sim`"):
        upgrade_row({k: v for k, v in SIM_V1.items() if k != "token_times_s"}, "x:3")
    with pytest.raises(InputError, match=r"x:4: field 'status'"):
        upgrade_row({**replay_v1(), "status": "fine"}, "x:4")
    with pytest.raises(InputError, match=r"x:5: field 'version': missing"):
        upgrade_row({"hello": 1}, "x:5")


def test_upgrade_file_reads_both_kinds_writes_atomically_and_never_overwrites_its_input(
    tmp_path: Path,
) -> None:
    source = _jsonl(tmp_path / "old.jsonl", [SIM_V1, replay_v1()])
    target = tmp_path / "new.jsonl"
    assert upgrade_file(source, target) == {"replay-1": 1, "sim-1": 1}
    assert [r.id for r in read_records(target)] == ["v", "s/0"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["new.jsonl", "old.jsonl"]  # no temporary left
    assert upgrade_file(target, tmp_path / "again.jsonl") == {"2": 2}
    assert (tmp_path / "again.jsonl").read_bytes() == target.read_bytes()
    before = source.read_bytes()
    with pytest.raises(InputError, match="is the input file"):
        upgrade_file(source, tmp_path / "." / "old.jsonl")
    assert source.read_bytes() == before
    bad = _jsonl(tmp_path / "bad.jsonl", [SIM_V1, {**SIM_V1, "token_times_s": "x"}])
    with pytest.raises(InputError, match=r"bad.jsonl:2: "):
        upgrade_file(bad, tmp_path / "out.jsonl")
    assert not (tmp_path / "out.jsonl").exists()
