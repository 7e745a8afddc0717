"""Interference attribution finds a planted long prefill beside shorts and stays quiet without one."""

from __future__ import annotations

from pathlib import Path

import pytest
from admissionkit import request, run_saved, workload

from flatshare.admission.attribution import AttributionConfig, caused_by, expected_ttft_s, pressure_events
from flatshare.admission.plan import PROFILE, default_engine
from flatshare.sim.profile import load_profile

pytestmark = pytest.mark.vllm


def test_planted_long_prefill_beside_shorts_is_found_and_blamed(tmp_path: Path) -> None:
    shorts = [request(f"short/{i}", 0.3 + 0.1 * i, 200 + 20 * i, 32) for i in range(5)]
    early = request("short/early", 0.0, 150, 64)  # before the long one: on time
    run = run_saved(tmp_path, workload(early, request("long/0", 0.05, 30_000, 8, "long"), *shorts))
    events = pressure_events(run)
    assert len(events) == 1
    event = events[0]
    assert {s.request_id for s in event.shorts} == {f"short/{i}" for i in range(5)}
    assert event.responsible[0][0] == "long/0"
    assert event.responsible[0][1] > 0.01
    assert event.engine == "sim0"
    assert all(s.ttft_s > 10 * s.expected_s for s in event.shorts)
    assert caused_by("long/0", events) == [event]


def test_shorts_without_a_long_request_raise_no_event(tmp_path: Path) -> None:
    shorts = [request(f"short/{i}", 0.15 * i, 100 + 40 * i, 128) for i in range(10)]
    run = run_saved(tmp_path, workload(*shorts))
    assert pressure_events(run) == []
    assert all(r.ttft_s is not None and r.ttft_s < 0.2 for r in run.records)


def test_a_strict_threshold_flags_the_same_quiet_run(tmp_path: Path) -> None:
    """The null result is not a blind detector: with no slack at all, ordinary batching shows up."""
    shorts = [request(f"short/{i}", 0.0, 400, 64) for i in range(6)]
    run = run_saved(tmp_path, workload(*shorts))
    assert pressure_events(run) == []
    assert pressure_events(run, AttributionConfig(slowdown=1.0, margin_s=0.0))


def test_expected_ttft_alone_matches_the_simulated_engine(tmp_path: Path) -> None:
    run = run_saved(tmp_path, workload(request("short/1", 0.0, 5000, 4)))
    expected = expected_ttft_s(5000, load_profile(PROFILE), default_engine().max_num_batched_tokens)
    assert run.records[0].ttft_s == pytest.approx(expected, rel=1e-6)
