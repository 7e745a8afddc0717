"""Real traces on the cluster: one run per (trace, engines, window, condition), and calibration.

A window of `TraceCase.window_s` trace seconds replays in `replay_s` seconds. The first
`CALIBRATION_FRACTION` of it (by send time) calibrates; results cover requests sent in the rest. The
baseline run (`off`) goes first; the threshold rule's thresholds are then calibrated from that saved
run's requests and engine samples in the first 20% only (`calibrate_from_run`), with the gateway's own
`calibrate_thresholds`, and every calibrated condition of the window uses them. Conditions with
make-room mark requests whose input exceeds the calibrated input threshold as long (priority 10), the
rest as short (priority 1), as a gateway can from the input alone.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from flatshare.admission.cluster import run_cluster
from flatshare.admission.plan import (
    CALIBRATION_FRACTION,
    LONG_PRIORITY,
    SHORT_PRIORITY,
    AdmissionPlan,
    Condition,
    TraceCase,
)
from flatshare.admission.runs import SavedRun, load_run, run_dir, save_run
from flatshare.admission.synthetic import condition_facts, engine_config, thresholds_json
from flatshare.policy.calibrate import Calibration, CalibrationSample, calibrate_thresholds
from flatshare.policy.policies import make_policy
from flatshare.policy.routing import Thresholds
from flatshare.sim.profile import load_profile
from flatshare.workloads.model import Session, Workload


def workload_key(case: TraceCase, engines: int) -> str:
    return f"{case.name}-e{engines}"


def trace_workload(case: TraceCase, window: int, engines: int, max_model_len: int) -> Workload:
    return case.spec(window, engines).build(window, max_model_len=max_model_len)


def prioritize(workload: Workload, long_input_tokens: int) -> Workload:
    """Long-input requests at priority 10, the rest at 1 (for make-room's protection)."""

    def session(s: Session) -> Session:
        requests = tuple(
            dataclasses.replace(
                r, priority=LONG_PRIORITY if r.prompt_tokens > long_input_tokens else SHORT_PRIORITY
            )
            for r in s.requests
        )
        return dataclasses.replace(s, requests=requests)

    return dataclasses.replace(workload, sessions=tuple(session(s) for s in workload.sessions))


def calibration_samples(run: SavedRun, cutoff_s: float) -> list[CalibrationSample]:
    """The saved run's request sizes and KV readings at or before `cutoff_s`, nothing later."""
    samples = [
        CalibrationSample(r.send_s, input_tokens=r.prompt_tokens) for r in run.records if r.send_s <= cutoff_s
    ]
    samples += [CalibrationSample(float(s["t"]), kv_usage=float(s["kv_usage"])) for s in run.samples]
    return [s for s in samples if s.t <= cutoff_s]


def calibrate_from_run(run: SavedRun) -> Calibration:
    """The threshold rule's thresholds from the first 20% of a saved run (`eval_from_s` marks its end).

    Only samples up to the cutoff reach the gateway's `calibrate_thresholds` (with fraction 1: the whole
    prefix), so nothing after it can change the thresholds.
    """
    cutoff = float(run.facts["eval_from_s"])
    prefix = calibration_samples(run, cutoff)
    source = (
        f"{run.workload}/{run.condition}/s{run.seed}: first {CALIBRATION_FRACTION:.0%} (t <= {cutoff:.2f})"
    )
    return calibrate_thresholds(prefix, fraction=1.0, source=source)


def run_trace(
    out: Path,
    plan: AdmissionPlan,
    case: TraceCase,
    engines: int,
    window: int,
    condition: Condition,
    calibration: Calibration | None = None,
) -> str:
    """Run one condition on one window and save it; returns the folder."""
    if condition.calibrated and calibration is None:
        raise ValueError(f"condition {condition.key} needs the window's calibration")
    thresholds = calibration.thresholds.thresholds() if calibration else None
    workload = trace_workload(case, window, engines, plan.engine.max_model_len)
    if condition.make_room and thresholds is not None:
        workload = prioritize(workload, thresholds.input_tokens)
    config = engine_config(plan.engine, condition)
    policy = make_policy(condition.routing_policy, thresholds, condition.prefer, seed=window)
    replay_s = case.replay_s(engines)
    cluster = run_cluster(
        workload,
        config,
        load_profile(plan.profile),
        engines,
        policy,
        until_s=replay_s,
        stop_s=replay_s + plan.drain_s,
        tick_s=plan.occupancy_tick_s,
    )
    key = workload_key(case, engines)
    folder = run_dir(out, key, condition.key, window)
    save_run(folder, cluster, _facts(plan, case, engines, window, condition, thresholds, calibration))
    return str(folder)


def _facts(
    plan: AdmissionPlan,
    case: TraceCase,
    engines: int,
    window: int,
    condition: Condition,
    thresholds: Thresholds | None,
    calibration: Calibration | None,
) -> dict[str, Any]:
    replay_s = case.replay_s(engines)
    return {
        "workload": workload_key(case, engines),
        "trace": case.name,
        "part": "trace",
        "engines": engines,
        "condition": condition_facts(condition),
        "seed": window,
        "spec": str(case.spec(window, engines)),
        "rate": case.rate_for(engines),
        "thresholds": thresholds_json(thresholds),
        "calibration": None
        if calibration is None
        else {
            "source": calibration.thresholds.calibrated_from,
            "cutoff_t": calibration.cutoff_t,
            "token_samples": calibration.token_samples,
            "kv_samples": calibration.kv_samples,
        },
        "long_input_tokens": thresholds.input_tokens if thresholds else None,
        "replay_s": replay_s,
        "eval_from_s": CALIBRATION_FRACTION * replay_s,
        "engine_config": engine_config(plan.engine, condition).to_json(),
        "profile": plan.profile,
        "drain_s": plan.drain_s,
    }


def run_baseline_and_calibrate(
    out: Path, plan: AdmissionPlan, case: TraceCase, engines: int, window: int, baseline: Condition
) -> tuple[str, Calibration]:
    """Run the baseline of a window, then calibrate from what it saved (reading the saved files)."""
    folder = run_trace(out, plan, case, engines, window, baseline)
    return folder, calibrate_from_run(load_run(Path(folder)))
