"""Calibration reads only the first 20% of a window: changing the rest leaves the thresholds unchanged."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from flatshare.admission.plan import AdmissionPlan, TraceCase
from flatshare.admission.runs import load_run
from flatshare.admission.traces import calibration_samples, run_baseline_and_calibrate
from flatshare.workloads.traces.azure import parse_timestamp

pytestmark = pytest.mark.vllm

WINDOW_S = 40.0  # trace seconds, from the trace's first record
RATE = 2.4  # 2 engines: 16.7 replay seconds, cutoff at 3.3 s (8 trace seconds)


def _window(
    traces_dir: Path, tmp: Path, name: str, edit_after_s: float | None, edit_before_s: float | None
) -> Path:
    """The first WINDOW_S seconds of the Azure conversation trace, with the sizes of the requests after
    (or before) a time multiplied and extra requests added there."""
    source = traces_dir / "azure-llm-2023" / "AzureLLMInferenceTrace_conv.csv"
    with source.open(newline="") as f:
        rows = list(csv.reader(f))
    header, body = rows[0], rows[1:]
    t0 = parse_timestamp(body[0][0])
    out = []
    for stamp, ctx, gen in body:
        t = parse_timestamp(stamp) - t0
        if t >= WINDOW_S:
            break
        changed = (edit_after_s is not None and t > edit_after_s) or (
            edit_before_s is not None and t < edit_before_s
        )
        out.append([stamp, str(int(ctx) * 3 if changed else ctx), gen])
        if changed:
            out.append([stamp, "6000", "50"])
    path = tmp / f"{name}.csv"
    with path.open("w", newline="") as f:
        csv.writer(f).writerows([header, *out])
    return path


def _calibrate(tmp: Path, path: Path, name: str) -> tuple[float, int, float]:
    plan = AdmissionPlan(drain_s=60.0, workers=1)
    case = TraceCase(name, "azure", str(path), RATE, WINDOW_S)
    _, calibration = run_baseline_and_calibrate(tmp / name, plan, case, 2, 0, plan.trace_conditions[0])
    t = calibration.thresholds
    return t.kv_usage, t.input_tokens, calibration.cutoff_t


def test_changing_the_last_80_percent_leaves_the_thresholds_unchanged(
    traces_dir: Path, tmp_path: Path
) -> None:
    cutoff_trace_s = 0.2 * WINDOW_S
    original = _calibrate(tmp_path, _window(traces_dir, tmp_path, "orig", None, None), "orig")
    later = _calibrate(tmp_path, _window(traces_dir, tmp_path, "later", cutoff_trace_s + 0.5, None), "later")
    earlier = _calibrate(tmp_path, _window(traces_dir, tmp_path, "earlier", None, cutoff_trace_s), "earlier")
    assert later == original
    assert earlier[:2] != original[:2]  # the test can fail: the first 20% does matter


def test_calibration_samples_stop_at_the_cutoff(traces_dir: Path, tmp_path: Path) -> None:
    plan = AdmissionPlan(drain_s=60.0, workers=1)
    path = _window(traces_dir, tmp_path, "orig", None, None)
    folder, calibration = run_baseline_and_calibrate(
        tmp_path, plan, TraceCase("t", "azure", str(path), RATE, WINDOW_S), 2, 0, plan.trace_conditions[0]
    )
    run = load_run(Path(folder))
    cutoff = float(run.facts["eval_from_s"])
    assert cutoff == pytest.approx(0.2 * WINDOW_S / RATE)
    samples = calibration_samples(run, cutoff)
    assert max(s.t for s in samples) <= cutoff
    assert calibration.token_samples == sum(r.send_s <= cutoff for r in run.records)
    assert max(r.send_s for r in run.records) > 4 * cutoff
