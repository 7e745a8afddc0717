"""The file commands fuzzed with absurd run folders and planted symlinks (issue 32): `flatshare report` and
`flatshare listen` on a good saved run changed in one to three places (a folder renamed, a file replaced by
odd JSON or removed, a field of a record, sample or fact set to an absurd value), with symlinks planted at
output names that point outside the folder. Each run ends in success or the CLI's refusal (one line,
`error: `, exit 2), never a traceback, and never writes through a symlink.

Bounded for `make test` (fixed examples, `kit.fuzz`); `FLATSHARE_FUZZ=long` (`make fuzz`) runs 20x more."""

from __future__ import annotations

import json
import shutil
import uuid
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, note
from hypothesis import strategies as st
from typer.testing import CliRunner

from flatshare.cli import app
from kit.files import VICTIM_TEXT, plant
from kit.files import save_colocation_run as _save
from kit.fuzz import absurd_value, fuzz_settings, odd_file, planted

pytestmark = pytest.mark.fuzz
runner = CliRunner()
RECORD_FIELDS = ("send_s", "end_s", "token_times_s", "first_sentence_tokens", "prompt_tokens", "max_tokens",
                 "output_tokens", "status", "wait_s", "preemptions", "priority")  # fmt: skip
SAMPLE_FIELDS = ("t", "kv_usage", "running", "waiting", "preemptions_total", "cpu_tier_blocks", "engine")
FACT_FIELDS = (
    "duration_s",
    "preemptions",
    "scheduler_counters",
    "engine_config",
    "spec",
    "seed",
    "max_model_len",
)
FOLDER_NAMES = ("cfoo", "c-1", "c99999999999", "c", "s", "sx", "s-3")


def _mutation() -> st.SearchStrategy[tuple[str, Any, Any]]:
    return st.one_of(
        st.tuples(st.just("record"), st.sampled_from(RECORD_FIELDS), absurd_value()),
        st.tuples(st.just("sample"), st.sampled_from(SAMPLE_FIELDS), absurd_value()),
        st.tuples(st.just("fact"), st.sampled_from(FACT_FIELDS), absurd_value()),
        st.tuples(st.just("file"), st.sampled_from(["requests.jsonl", "samples.jsonl", "FACTS"]), odd_file()),
        st.tuples(
            st.just("remove"), st.sampled_from(["requests.jsonl", "samples.jsonl", "FACTS"]), st.none()
        ),
        st.tuples(st.just("rename"), st.sampled_from(FOLDER_NAMES), st.none()),
    )


def _rewrite(path: Path, change: Any) -> None:
    """Apply `change` to the file's (first) object; a file already replaced by something else is left."""
    try:
        text = path.read_text()
        rows = (
            [json.loads(line) for line in text.splitlines()]
            if path.suffix == ".jsonl"
            else [json.loads(text)]
        )
    except (OSError, ValueError, RecursionError):
        return
    if not rows or not isinstance(rows[0], dict):
        return
    change(rows[0])
    lines = [json.dumps(row) for row in rows]
    path.write_text("".join(f"{line}\n" for line in lines) if path.suffix == ".jsonl" else lines[0])


def _apply(run: Path, facts: str, mutation: tuple[str, Any, Any]) -> Path:
    """Apply one mutation to the run folder; returns where the folder is now."""
    what, name, value = mutation
    if not run.exists():
        return run
    path = {"record": "requests.jsonl", "sample": "samples.jsonl", "fact": facts}.get(what)
    if path is not None:
        _rewrite(run / path, lambda row: row.__setitem__(name, value))
    elif what == "file":
        (run / name.replace("FACTS", facts)).write_text(value)
    elif what == "remove":
        (run / name.replace("FACTS", facts)).unlink(missing_ok=True)
    else:
        moved = run.parent / name if name.startswith("s") else run.parent.parent / name / run.name
        if not moved.exists():
            moved.parent.mkdir(parents=True, exist_ok=True)
            run = run.rename(moved)
    return run


def _check(result: Any, victims: list[Path]) -> None:
    note(result.output)
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert result.exit_code in (0, 2), result.output
    if result.exit_code == 2:
        lines = result.output.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: "), result.output
    for victim in victims:
        assert victim.read_text() == VICTIM_TEXT


def _plant_all(folder: Path, names: list[str], outside: Path) -> list[Path]:
    victims = []
    for name in names:
        victim = outside / f"{uuid.uuid4().hex}.txt"
        plant(folder / name, victim)
        victims.append(victim)
    return victims


# -- flatshare report ------------------------------------------------------------------------------------
REPORT_OUTPUTS = (
    "report.md",
    "summary.json",
    "tail.png",
    "window_sweep.png",
    "stages.png",
    "cdf.png",
    "kv.png",
)


@pytest.fixture(scope="module")
def experiment(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("fuzz-report") / "template"
    _save(root, "alone", 0.3)
    _save(root, "vllm-priority", 4.0)
    return root


@fuzz_settings(15)
@given(
    mutations=st.lists(_mutation(), max_size=3),
    which=st.sampled_from(["alone", "vllm-priority"]),
    names=planted(REPORT_OUTPUTS),
)
def test_report_on_absurd_run_folders(
    experiment: Path, mutations: list[tuple[str, Any, Any]], which: str, names: list[str]
) -> None:
    root = experiment.parent / uuid.uuid4().hex
    shutil.copytree(experiment, root)
    try:
        run = root / "runs" / which / "c2" / "s0"
        for mutation in mutations:
            run = _apply(run, "engine.json", mutation)
        victims = _plant_all(root, names, root.parent / f"{root.name}-outside")
        _check(runner.invoke(app, ["report", str(root)]), victims)
    finally:
        shutil.rmtree(root, ignore_errors=True)


# -- flatshare listen ------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def voice_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from listen.listenkit import saved_run

    return saved_run(tmp_path_factory.mktemp("fuzz-listen") / "template", {})


@fuzz_settings(40)
@given(mutations=st.lists(_mutation(), min_size=1, max_size=3), names=planted(("c.wav", "c.png")))
def test_listen_on_absurd_run_folders(
    voice_run: Path, mutations: list[tuple[str, Any, Any]], names: list[str]
) -> None:
    root = voice_run.parent / uuid.uuid4().hex
    run = root / "runs" / "x" / "c1" / "s0"
    shutil.copytree(voice_run, run)
    try:
        for mutation in mutations:
            run = _apply(run, "run.json", mutation)
        out = root / "out"
        victims = _plant_all(out, names, root / "outside")
        _check(runner.invoke(app, ["listen", str(run), "--out", str(out / "c.wav")]), victims)
    finally:
        shutil.rmtree(root, ignore_errors=True)
