"""`run.json`'s facts of an endpoint-mode run, in the simulated mode's fields (`runs.py`), so the report
reads both alike: no profile, engine config, steps or occupancy (they live inside the engines).
"""

from __future__ import annotations

from typing import Any

from flatshare.admission.endpointplan import EndpointPlan
from flatshare.admission.gatewayreplay import WallRun
from flatshare.admission.plan import CALIBRATION_FRACTION, Condition, TraceCase, endpoint_thresholds
from flatshare.admission.synthetic import ALONE, condition_facts, thresholds_json
from flatshare.admission.traces import workload_key
from flatshare.policy.routing import Thresholds


def common_facts(plan: EndpointPlan, run: WallRun, condition: Condition) -> dict[str, Any]:
    """The facts every run has; `endpoint` and `backends` are those of the gateway the condition ran
    through."""
    g = plan.gateway_for(condition)
    return {
        "mode": "endpoint",
        "endpoint": g.url,
        "backends": list(g.backends),
        "model": g.model,
        "priorities": plan.priorities,
        "profile": None,
        "engine_config": None,
        "preemptions": run.preemptions,
        "steps": None,
        "virtual_s": None,
        "scheduler_counters": {},
        "wall_s": run.wall_s,
    }


def synthetic_facts(
    plan: EndpointPlan, run: WallRun, workload: str, condition: Condition, seed: int
) -> dict[str, Any]:
    thresholds = endpoint_thresholds(plan.synthetic.long_tokens)
    return common_facts(plan, run, condition) | {
        "workload": workload,
        "part": ALONE if condition.key == ALONE else "synthetic",
        "engines": 1 if condition.key == ALONE else len(plan.gateway.backends),
        "condition": condition_facts(condition),
        "seed": seed,
        "thresholds": thresholds_json(thresholds),
        "long_input_tokens": thresholds.input_tokens,
        "replay_s": None,
        "eval_from_s": 0.0,
    }


def trace_facts(
    plan: EndpointPlan,
    run: WallRun,
    case: TraceCase,
    window: int,
    condition: Condition,
    thresholds: Thresholds | None,
    calibration: dict[str, Any] | None,
) -> dict[str, Any]:
    """A trace run's facts; `case` is already cut to the plan's `trace_s`, `thresholds` those in force."""
    assert plan.trace_s is not None
    n = len(plan.gateway.backends)
    return common_facts(plan, run, condition) | {
        "workload": workload_key(case, n),
        "trace": case.name,
        "part": "trace",
        "engines": n,
        "condition": condition_facts(condition),
        "seed": window,
        "spec": str(case.spec(window, n)),
        "rate": case.rate_for(n),
        "thresholds": thresholds_json(thresholds if condition.routing_policy == "threshold" else None),
        "calibration": calibration,
        "long_input_tokens": thresholds.input_tokens if thresholds else None,
        "replay_s": plan.trace_s,
        "eval_from_s": CALIBRATION_FRACTION * plan.trace_s,
        "drain_s": plan.drain_s,
    }
