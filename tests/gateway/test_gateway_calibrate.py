"""Calibration: thresholds from the first 20% of a run, blind to the rest; loaders; the command."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from typer.testing import CliRunner

from flatshare.errors import InputError
from flatshare.gateway.__main__ import app
from flatshare.gateway.calibrate_inputs import load_samples
from flatshare.gateway.configfile import load_config
from flatshare.policy.calibrate import (
    KV_FLOOR,
    CalibrationSample,
    calibrate_thresholds,
    nearest_rank,
)
from flatshare.runfiles.records import ReplayRecord


def run_samples(seed: int, n: int = 1000) -> list[CalibrationSample]:
    """A run of `n` seconds: a request and a KV reading every second."""
    rng = random.Random(seed)
    out = []
    for t in range(n):
        out.append(CalibrationSample(float(t), input_tokens=rng.choice([200, 400, 800, 30000])))
        out.append(CalibrationSample(t + 0.5, kv_usage=rng.random()))
    return out


def test_nearest_rank() -> None:
    values = [float(v) for v in range(1, 11)]
    assert nearest_rank(values, 90) == 9 and nearest_rank(values, 100) == 10
    assert nearest_rank(values, 1) == 1 and nearest_rank([5.0], 50) == 5


def test_thresholds_are_percentiles_of_the_first_fifth() -> None:
    samples = [CalibrationSample(float(t), input_tokens=t + 1, kv_usage=t / 100) for t in range(100)]
    result = calibrate_thresholds(samples)
    # The first 20% by time: t <= 19.8, so t = 0..19 (tokens 1..20, KV 0.00..0.19).
    assert result.token_samples == result.kv_samples == 20
    assert result.thresholds.input_tokens == 18  # nearest-rank 90th of 1..20
    assert result.thresholds.kv_usage == 0.15  # nearest-rank 80th of 0.00..0.19
    assert calibrate_thresholds(samples, fraction=1.0).thresholds.input_tokens == 90


def test_changing_the_last_80_percent_leaves_the_thresholds_unchanged() -> None:
    base = run_samples(seed=1)
    result = calibrate_thresholds(base)
    cutoff = result.cutoff_t
    rng = random.Random(99)
    changed = [
        s
        if s.t <= cutoff
        else CalibrationSample(
            s.t,
            None if s.input_tokens is None else rng.randint(1, 200_000),
            None if s.kv_usage is None else rng.random(),
        )
        for s in base
    ]
    changed += [
        CalibrationSample(cutoff + 1.25, input_tokens=999_999),
        CalibrationSample(cutoff + 2.25, kv_usage=1.0),
    ]
    assert changed != base
    assert calibrate_thresholds(changed).thresholds == result.thresholds
    # ...while a change inside the first 20% does show.
    early = [CalibrationSample(s.t, 90_000, None) if s.input_tokens else s for s in base if s.t <= cutoff]
    assert calibrate_thresholds(early + [s for s in base if s.t > cutoff]).thresholds != result.thresholds


def test_kv_threshold_is_kept_off_zero() -> None:
    idle = [CalibrationSample(float(t), input_tokens=100, kv_usage=0.0) for t in range(50)]
    assert calibrate_thresholds(idle).thresholds.kv_usage == KV_FLOOR


def test_too_little_data_is_refused() -> None:
    few = [CalibrationSample(float(t), input_tokens=100, kv_usage=0.5) for t in range(10)]
    with pytest.raises(InputError, match="calibration needs at least 5"):
        calibrate_thresholds(few)
    with pytest.raises(InputError, match="fraction"):
        calibrate_thresholds(few, fraction=0)


def _jsonl(path: Path, rows: list[dict[str, object]]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def record(rid: str, send_s: float, prompt_tokens: int) -> dict[str, object]:
    """A request record of the current format (one token, done at once)."""
    return ReplayRecord(
        rid, rid, "chat", 0, prompt_tokens, 1, "sim0", send_s, token_times_s=[send_s], end_s=send_s
    ).to_json()


def test_old_records_are_refused_naming_the_field_and_the_converter(tmp_path: Path) -> None:
    sim_v1 = {"id": "r0", "arrival_s": 0.0, "prompt_tokens": 100, "finish_s": 1.0, "status": "finished"}
    replay_v1 = {**record("r0", 0.0, 100), "version": 1}
    for name, row, field in (("sim", sim_v1, "arrival_s"), ("replay", replay_v1, "version")):
        path = _jsonl(tmp_path / f"{name}.jsonl", [row])
        with pytest.raises(
            InputError, match=rf"{name}.jsonl:1: field '{field}': .*flatshare records upgrade"
        ):
            load_samples([path])
        folder = tmp_path / name
        folder.mkdir()
        path.rename(folder / "requests.jsonl")
        _jsonl(folder / "samples.jsonl", [])
        with pytest.raises(
            InputError, match=rf"requests.jsonl:1: field '{field}': .*flatshare records upgrade"
        ):
            load_samples([folder])


def test_loaders_read_simulator_runs_and_audit_logs(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    _jsonl(run / "requests.jsonl", [record(f"r{i}", i, 100 * i) for i in range(10)])
    _jsonl(run / "samples.jsonl", [{"t": i * 0.5, "kv_usage": 0.1, "running": 1} for i in range(20)])
    samples = load_samples([run])
    assert sum(s.input_tokens is not None for s in samples) == 10
    assert sum(s.kv_usage is not None for s in samples) == 20
    audit = _jsonl(
        tmp_path / "audit.jsonl",
        [
            {
                "t": 1000.0 + i,
                "input_tokens": 50,
                "attempt": 1 if i % 2 else 2,
                "backends": [
                    {"name": "a", "kv_usage": 0.3, "stale": False},
                    {"name": "b", "kv_usage": 0.9, "stale": True},
                ],
            }
            for i in range(4)
        ],
    )
    from_audit = load_samples([audit])
    assert [(s.input_tokens, s.kv_usage) for s in from_audit] == [(50, None), (None, 0.3)] * 2
    replay = _jsonl(tmp_path / "replay.jsonl", [record("v/0/0", 2.5, 640)])
    assert load_samples([replay]) == [CalibrationSample(2.5, input_tokens=640)]
    bad = _jsonl(tmp_path / "bad.jsonl", [{"hello": 1}])
    with pytest.raises(InputError, match=r"bad.jsonl:1: not an audit line"):
        load_samples([bad])


def test_calibrate_command_prints_and_saves(tmp_path: Path) -> None:
    rows = [record(f"r{i}", i, 1000 + 10 * i) for i in range(100)]
    requests = _jsonl(tmp_path / "requests.jsonl", rows)
    samples = _jsonl(tmp_path / "samples.jsonl", [{"t": i, "kv_usage": i / 100} for i in range(100)])
    config = tmp_path / "gw.toml"
    config.write_text('# keep me\n[[backends]]\nurl = "http://a:1"\n')
    result = CliRunner().invoke(
        app, ["calibrate-thresholds", str(requests), str(samples), "--config", str(config)]
    )
    assert result.exit_code == 0, result.output
    assert "input_tokens = 1170" in result.output and "kv_usage = 0.15" in result.output
    saved = load_config(config).thresholds
    assert (saved.input_tokens, saved.kv_usage) == (1170, 0.15)
    assert str(requests) in saved.calibrated_from and "# keep me" in config.read_text()
    missing = CliRunner().invoke(app, ["calibrate-thresholds", str(tmp_path / "nope.jsonl")])
    assert missing.exit_code == 2 and "cannot read" in missing.output
