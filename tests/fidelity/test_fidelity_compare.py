"""Run metrics and the comparison: percentiles per class, errors against the first real run, bounds
from the real-vs-real noise, and a verdict that fails when a checked row is out of bounds."""

from __future__ import annotations

import pytest

from flatshare.fidelity.compare import Bounds, compare, relative, verdict
from flatshare.fidelity.measures import run_metrics, samples_of
from flatshare.runfiles.records import ReplayRecord
from flatshare.runfiles.samples import EngineSample


def _record(rid: str, cls: str, send: float, first: float, gap: float, n: int) -> ReplayRecord:
    times = [first + i * gap for i in range(n)]
    return ReplayRecord(rid, rid, cls, 0, 100, n, "e", send, token_times_s=times, end_s=times[-1])


def _run(
    scale: float, preemptions: int = 2, kv: float = 0.5
) -> tuple[list[ReplayRecord], list[EngineSample]]:
    records = [
        _record(f"v{i}", "voice", i, i + 0.05 * scale * (1 + i % 3), 0.004 * scale, 20) for i in range(10)
    ] + [_record(f"a{i}", "agent", i, i + 0.5 * scale, 0.01 * scale, 50) for i in range(5)]
    samples = [EngineSample(t * 0.5, kv, 1, 0, 0, 0) for t in range(20)]
    return records, samples


def test_metrics_per_class_and_overall() -> None:
    records, samples = _run(1.0)
    records.append(ReplayRecord("x", "x", "voice", 0, 1, 1, "e", 0.0, status="failed", end_s=1.0))
    m = run_metrics(records, samples, preemptions=2)
    assert m.counts == {"voice": 10, "agent": 5, "all": 15} and m.not_ok == 1
    assert m.values["voice"]["tpot_p50"] == pytest.approx(0.004)
    assert m.values["agent"]["ttft_p95"] == pytest.approx(0.5)
    assert m.values["voice"]["ttft_p50"] == pytest.approx(0.1)
    assert m.kv_use_mean == pytest.approx(0.5) and m.preemptions == 2
    assert len(samples_of(records)["voice"]["gap"]) == 10 * 19


def test_relative_errors_and_counts() -> None:
    assert relative(1.2, 1.0) == pytest.approx(0.2)
    assert relative(3, 0, count=True) == 3.0 and relative(0, 0, count=True) == 0.0
    assert relative(1.0, 0.0) is None and relative(None, 1.0) is None


def test_a_sim_like_the_real_runs_passes_and_the_bound_follows_the_noise() -> None:
    real = [run_metrics(*_run(1.0), 2), run_metrics(*_run(1.1), 2)]
    rows = compare(real, run_metrics(*_run(1.05), 2), Bounds(floor=0.15, k=2.0))
    ttft = next(r for r in rows if r.cls == "voice" and r.quantity == "ttft_p50")
    assert ttft.noise == pytest.approx(0.1, abs=1e-3) and ttft.bound == pytest.approx(0.2, abs=2e-3)
    assert ttft.ok and verdict(rows)
    assert {r.quantity for r in rows if r.cls == "run"} == {"preemptions", "kv_use_mean"}


def test_a_mismatched_sim_fails_the_verdict() -> None:
    real = [run_metrics(*_run(1.0), 2), run_metrics(*_run(1.05), 2)]
    slow = compare(real, run_metrics(*_run(1.6), 2), Bounds())
    assert not verdict(slow)
    assert any(r.quantity == "ttft_p50" and not r.ok for r in slow)
    crowded = compare(real, run_metrics(*_run(1.0, preemptions=12, kv=0.9), 12), Bounds())
    assert not verdict(crowded)
    assert {r.quantity for r in crowded if not r.ok} == {"preemptions", "kv_use_mean"}


def test_with_one_real_run_the_floor_is_the_bound() -> None:
    rows = compare([run_metrics(*_run(1.0), 2)], run_metrics(*_run(1.1), 2), Bounds(floor=0.15))
    assert all(r.noise is None and r.bound == 0.15 for r in rows if r.quantity != "preemptions")
    preemptions = next(r for r in rows if r.quantity == "preemptions")
    assert preemptions.bound == pytest.approx(2 / 2**0.5)  # k x sqrt(n) / n: Poisson counting noise
    with pytest.raises(ValueError):
        Bounds(floor=0)


def test_engine_rows_compare_the_servers_means_with_the_sims() -> None:
    real = [run_metrics(*_run(1.0), 2), run_metrics(*_run(1.05), 2)]
    servers = [{"ttft": 0.05, "itl": 0.002, "e2e": 0.3}, {"ttft": 0.06, "itl": 0.0021, "e2e": 0.33}]
    rows = compare(
        real, run_metrics(*_run(1.0), 2), Bounds(), servers, {"ttft": 0.04, "itl": 0.003, "e2e": 0.31}
    )
    engine = {r.quantity: r for r in rows if r.cls == "engine"}
    assert set(engine) == {"ttft_mean", "itl_mean", "e2e_mean"} and all(r.checked for r in engine.values())
    assert engine["itl_mean"].sim_error == pytest.approx(0.5) and not engine["itl_mean"].ok
    assert engine["e2e_mean"].ok and not verdict(rows)
