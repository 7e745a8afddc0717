"""The simulator beside a real run: the agreement table from saved runs (real seeds 0 and 1, simulated
seed 0), and the refusal of a folder that holds no real-engine runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from flatshare.colocation.beside import agreement, beside_lines, sim_beside_real
from flatshare.colocation.runs import SavedRun
from flatshare.errors import InputError
from flatshare.runfiles.records import ReplayRecord


def _voice(i: int, ttft: float) -> ReplayRecord:
    times = [10.0 * i + ttft + 0.01 * k for k in range(3)]
    return ReplayRecord(f"v{i}", "call", "voice", 0, 100, 3, "e", 10.0 * i, 3, times, times[-1], "length")


def _run(condition: str, ttft: float, seed: int, preemptions: int) -> SavedRun:
    facts = {"duration_s": 100.0, "preemptions": preemptions, "scheduler_counters": {}}
    return SavedRun(condition, 2, seed, [_voice(i, ttft) for i in range(5)], [], facts)


def test_the_table_sets_the_simulator_against_the_real_noise() -> None:
    real = [_run("vllm-priority", 0.10, 0, 4), _run("vllm-priority", 0.12, 1, 6)]
    sim = [_run("vllm-priority", 0.15, 0, 2)]
    rows = {row.measure: row for row in agreement(real, sim)}
    ttft = rows["voice TTFT mean s"]
    assert (ttft.real, ttft.real_again, ttft.sim) == pytest.approx((0.10, 0.12, 0.15))
    assert ttft.noise == pytest.approx(0.2) and ttft.error == pytest.approx(0.5)
    assert rows["preemptions"].error == pytest.approx(-0.5)
    assert rows["agents' tokens/s"].real is None and rows["agents' tokens/s"].error is None
    lines = beside_lines(list(rows.values()), "p.json")
    assert "| vllm-priority | voice TTFT mean s | 0.100 | 0.120 | +20% | 0.150 | +50% |" in lines


def test_a_simulated_experiment_is_not_a_real_one(tmp_path: Path) -> None:
    from kit.files import save_colocation_run

    save_colocation_run(tmp_path, "vllm-priority", 0.3)
    with pytest.raises(InputError, match="not a real-engine run"):
        sim_beside_real(tmp_path, "vllm-cpu-tiny", tmp_path / "beside")
