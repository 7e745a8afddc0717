"""`flatshare calibrate-thresholds --config` edits the user's config file without damaging it (issue 32, item
8): comments, a commented table header and an inline table survive, a run path with an emoji round-trips,
and a config that is wrong anywhere is refused before anything is written. Bounded reads and refused audit
lines (item 11): one line, exit 2."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest
from typer.testing import CliRunner

from flatshare.cli import app
from flatshare.gateway.configfile import load_config
from flatshare.runfiles.records import ReplayRecord
from kit.files import plant, refused, untouched

runner = CliRunner()
BACKENDS = '# keep me\n[[backends]]\nurl = "http://a:1"  # the first one\n'


def _run(folder: Path) -> Path:
    """A run folder whose first fifth calibrates to input_tokens 1170, kv_usage 0.15."""
    folder.mkdir(parents=True, exist_ok=True)
    rows = [
        ReplayRecord(
            f"r{i}", "s", "chat", 0, 1000 + 10 * i, 1, "sim0", i, token_times_s=[i], end_s=i
        ).to_json()
        for i in range(100)
    ]
    (folder / "requests.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (folder / "samples.jsonl").write_text(
        "".join(json.dumps({"t": i, "kv_usage": i / 100}) + "\n" for i in range(100))
    )
    return folder


def _calibrate(run: Path, config: Path) -> object:
    return runner.invoke(app, ["calibrate-thresholds", str(run), "--config", str(config)])


CONFIGS = {
    "a commented header": BACKENDS + "\n[thresholds]  # set by hand\nkv_usage = 0.5\n",
    "an inline table": "thresholds = {kv_usage = 0.5}  # by hand\n" + BACKENDS,
    "a dotted key": BACKENDS.replace("[[backends]]", "thresholds.kv_usage = 0.5\n\n[[backends]]"),
    "no table": BACKENDS,
}


@pytest.mark.parametrize("case", CONFIGS)
def test_the_file_is_edited_in_place_and_keeps_its_comments(tmp_path: Path, case: str) -> None:
    config = tmp_path / "gw.toml"
    config.write_text(CONFIGS[case])
    result = _calibrate(_run(tmp_path / "run"), config)
    assert result.exit_code == 0, result.output
    text = config.read_text()
    data = tomllib.loads(text)  # still TOML, with one thresholds table
    assert (data["thresholds"]["input_tokens"], data["thresholds"]["kv_usage"]) == (1170, 0.15)
    assert "# keep me" in text and "# the first one" in text
    if "by hand" in CONFIGS[case]:
        assert ("# set by hand" in text) or ("# by hand" in text)
    saved = load_config(config).thresholds
    assert (saved.input_tokens, saved.kv_usage) == (1170, 0.15)


def test_a_run_path_with_an_emoji_round_trips(tmp_path: Path) -> None:
    run = _run(tmp_path / "run-😀")
    for name, text in (("gw.toml", BACKENDS), ("gw.json", json.dumps({"backends": [{"url": "http://a:1"}]}))):
        config = tmp_path / name
        config.write_text(text)
        result = _calibrate(run, config)
        assert result.exit_code == 0, result.output
        assert load_config(config).thresholds.calibrated_from == str(run)


@pytest.mark.parametrize(
    "text, words",
    [
        (BACKENDS + "[poll]\ninterval_s = 0\n", ["interval_s"]),
        (BACKENDS + "thresholds = 3\n", ["thresholds"]),
        (BACKENDS + "[thresholds]\nunknown = 1\n", ["unknown"]),
        ("[[backends]\n", ["TOML"]),
    ],
)
def test_a_config_wrong_anywhere_is_refused_before_writing(
    tmp_path: Path, text: str, words: list[str]
) -> None:
    config = tmp_path / "gw.toml"
    config.write_text(text)
    refused(_calibrate(_run(tmp_path / "run"), config), str(config), *words)
    assert config.read_text() == text


def test_a_symlinked_config_is_refused_not_replaced(tmp_path: Path) -> None:
    victim = tmp_path / "elsewhere" / "real.toml"
    link = plant(tmp_path / "gw.toml", victim)
    refused(_calibrate(_run(tmp_path / "run"), link), "symlink")
    untouched(victim)
    assert link.is_symlink()


def test_an_endless_run_file_is_a_bounded_one_line_error() -> None:
    refused(runner.invoke(app, ["calibrate-thresholds", "/dev/zero"]), "/dev/zero")


def test_an_endless_config_file_is_a_bounded_one_line_error(tmp_path: Path) -> None:
    config = tmp_path / "zero.toml"
    config.symlink_to("/dev/zero")
    refused(_calibrate(_run(tmp_path / "run"), config))


@pytest.mark.parametrize("field, value", [("input_tokens", -7), ("input_tokens", 2.5), ("kv_usage", 1.5)])
def test_an_audit_line_out_of_range_is_a_one_line_error(tmp_path: Path, field: str, value: float) -> None:
    row = {"t": 1.0, "input_tokens": 50, "backends": [{"name": "a", "kv_usage": 0.3, "stale": False}]}
    if field == "kv_usage":
        row["backends"] = [{"name": "a", "kv_usage": value, "stale": False}]
    else:
        row[field] = value
    audit = tmp_path / "audit.jsonl"
    audit.write_text(json.dumps(row) + "\n")
    refused(runner.invoke(app, ["calibrate-thresholds", str(audit)]), "audit.jsonl:1", field)
