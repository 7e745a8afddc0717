"""One run folder written by `write_run` and read back by `load_run`: the same records, samples, facts
and tables; each file checked as it is read."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from flatshare.errors import InputError
from flatshare.runfiles.files import atomic_folder
from flatshare.runfiles.records import ReplayRecord
from flatshare.runfiles.run import load_run, write_replay_run, write_run
from flatshare.runfiles.samples import EngineSample, read_sample_rows, sample_rows


def _record(i: int) -> ReplayRecord:
    return ReplayRecord(
        id=f"r{i}",
        session_id="s0",
        cls="voice",
        priority=0,
        prompt_tokens=10,
        max_tokens=2,
        engine="sim0",
        send_s=float(i),
        first_sentence_tokens=1,
        token_times_s=[i + 0.1, i + 0.2],
        end_s=i + 0.2,
    )


SAMPLES = [("sim0", EngineSample(0.5, 0.25, 1, 0, 0, 0)), ("sim1", EngineSample(0.5, 0.5, 2, 1, 3, 0))]


def _needs_seed(facts: dict[str, Any], where: str) -> dict[str, Any]:
    if not isinstance(facts.get("seed"), int):
        raise InputError(f"{where}: seed must be an integer")
    return facts


def test_a_folder_reads_back_as_written(tmp_path: Path) -> None:
    records = [_record(0), _record(1)]
    facts = {"seed": 3, "duration_s": 2.0}
    with atomic_folder(tmp_path / "run") as folder:
        write_run(
            folder,
            records,
            sample_rows(SAMPLES),
            facts,
            facts_file="engine.json",
            tables={"extra.jsonl": [{"a": 1}]},
        )
    run = load_run(
        tmp_path / "run",
        facts_file="engine.json",
        check_facts=_needs_seed,
        tables=("extra.jsonl",),
        read_samples=read_sample_rows,
    )
    assert [r.to_json() for r in run.records] == [r.to_json() for r in records]
    assert run.samples == [{"engine": e, **s.to_json()} for e, s in SAMPLES]
    assert run.facts == facts and run.tables == {"extra.jsonl": [{"a": 1}]}
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == [
        "engine.json",
        "extra.jsonl",
        "requests.jsonl",
        "samples.jsonl",
    ]
    first = (tmp_path / "run" / "samples.jsonl").read_text().splitlines()[0]
    assert first == json.dumps({"engine": "sim0", **SAMPLES[0][1].to_json()}, sort_keys=True)
    assert (tmp_path / "run" / "engine.json").read_text() == json.dumps(
        facts, indent=2, sort_keys=True
    ) + "\n"


def test_facts_are_checked_first_and_the_error_names_the_file(tmp_path: Path) -> None:
    write_run(tmp_path, [_record(0)], sample_rows(SAMPLES), {"seed": "three"})
    with pytest.raises(InputError, match=r"run\.json: seed must be an integer"):
        load_run(tmp_path, check_facts=_needs_seed)


def test_a_strict_sample_reader_refuses_a_row_that_is_not_an_engine_sample(tmp_path: Path) -> None:
    write_run(tmp_path, [_record(0)], [{"engine": "b0", "t": 0.0, "healthy": True}], {"seed": 1})
    assert load_run(tmp_path).samples == [{"engine": "b0", "t": 0.0, "healthy": True}]
    with pytest.raises(InputError, match=r"samples\.jsonl:1: not a sample"):
        load_run(tmp_path, read_samples=read_sample_rows)


def test_the_drivers_run_json_is_version_stamped_and_counts_statuses(tmp_path: Path) -> None:
    failed = _record(1)
    failed.status, failed.error = "failed", "boom"
    run = write_replay_run(tmp_path / "out", [_record(0), failed], SAMPLES, {"driver": "virtual"})
    assert run == load_run(tmp_path / "out").facts
    assert run["run_version"] == 1 and run["record_version"] == 2
    assert (run["requests"], run["statuses"]) == (2, {"failed": 1, "ok": 1})
