"""`flatshare listen` on malformed or absurd run folders (issue 32, item 10): a one-line error naming the
problem, exit 2, checked before speech tools are needed or anything is written; a symlink planted as the
wav or png is replaced, never written through. `replay --workload` with an absurd size fails fast."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from listenkit import saved_run
from typer.testing import CliRunner

from flatshare.cli import app
from flatshare.listen.render import render_call
from kit.files import plant, refused, untouched

runner = CliRunner()


def _listen(run: Path, out: Path) -> Any:
    return runner.invoke(app, ["listen", str(run), "--out", str(out / "c.wav")])


def _edit_record(run: Path, change: dict[str, Any]) -> None:
    """Apply `change` to the first record (a callable value maps the old value)."""
    path = run / "requests.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    for key, value in change.items():
        rows[0][key] = value(rows[0][key]) if callable(value) else value
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))


def _shift(t: Any) -> Any:
    return [x + 1e300 for x in t] if isinstance(t, list) else t + 1e300


RECORDS = {
    "end_s 1e300": ({"end_s": 1e300}, "end_s"),
    "end_s 1e12": ({"end_s": 1e12}, "end_s"),
    "first_sentence_tokens -100": ({"first_sentence_tokens": -100}, "first_sentence_tokens"),
    "end_s before send_s": ({"end_s": lambda _: 0.0, "send_s": lambda s: s + 5.0}, "end_s"),
    "times shifted by 1e300": ({k: _shift for k in ("send_s", "end_s", "token_times_s")}, "send_s"),
    "2,000,000 output tokens": (
        {"token_times_s": lambda t: [math.ceil(t[-1])] * 2_000_000, "output_tokens": 2_000_000},
        "clip",
    ),
}


@pytest.mark.parametrize("case", RECORDS)
def test_an_absurd_record_is_refused(tmp_path: Path, case: str) -> None:
    run = saved_run(tmp_path / "run", {})
    change, word = RECORDS[case]
    _edit_record(run, change)
    refused(_listen(run, tmp_path), word)
    assert not (tmp_path / "c.wav").exists() and not (tmp_path / "c.png").exists()


RUN_JSON = {
    "not JSON": "{nope",
    "a list": "[1, 2]",
    "100,000 deep": "[" * 100_000 + "]" * 100_000,
    "a spec of 3000 callers for 100000 s": "SPEC=voice:callers=3000,duration=100000",
    "a string max_model_len": "MML=long",
}


@pytest.mark.timeout(120)  # a guard against the hang this reproduces, not a timing target
@pytest.mark.parametrize("case", RUN_JSON)
def test_a_malformed_run_json_is_refused(tmp_path: Path, case: str) -> None:
    run = saved_run(tmp_path / "run", {})
    text = RUN_JSON[case]
    if text.startswith(("SPEC=", "MML=")):
        facts = json.loads((run / "run.json").read_text())
        key = "spec" if text.startswith("SPEC=") else "max_model_len"
        facts[key] = text.split("=", 1)[1]
        text = json.dumps(facts)
    (run / "run.json").write_text(text)
    refused(_listen(run, tmp_path), "run.json" if "SPEC" not in RUN_JSON[case] else "session-seconds")


@pytest.mark.parametrize("engine_config", [[1, 2], {"max_model_len": "x"}, {"max_model_len": 10**15}])
def test_a_malformed_engine_json_is_refused(tmp_path: Path, engine_config: Any) -> None:
    run = saved_run(tmp_path / "run", {})
    facts = json.loads((run / "run.json").read_text())
    (run / "run.json").unlink()
    (run / "engine.json").write_text(json.dumps({**facts, "engine_config": engine_config}))
    refused(_listen(run, tmp_path), "engine.json", "max_model_len" if isinstance(engine_config, dict) else "")


def _silent(text: str, seconds: float, rate: int, voice: Any) -> np.ndarray:
    return np.full(round(seconds * rate), 0.1, dtype=np.float32)


@pytest.mark.parametrize("name", ["c.wav", "c.png"])
def test_a_planted_output_symlink_is_replaced_not_written_through(tmp_path: Path, name: str) -> None:
    run = saved_run(tmp_path / "run", {})
    out = tmp_path / "out"
    victim = tmp_path / "elsewhere" / "victim.txt"
    link = plant(out / name, victim)
    done = render_call(run, 0, 1, out / "c.wav", speaker=_silent)
    untouched(victim, link)
    assert done.wav.stat().st_size > 44 and done.png.stat().st_size > 0


@pytest.mark.timeout(120)
def test_replay_of_an_absurd_workload_fails_fast_naming_the_bound(tmp_path: Path) -> None:
    spec = "voice:callers=100000000,duration=1e9"
    result = runner.invoke(app, ["replay", "--workload", spec, "--sim", "--out", str(tmp_path / "r")])
    refused(result, "callers must lie in [0, 1e+06]")
    assert not (tmp_path / "r").exists()
