"""The synthetic case: one long request beside ten short ones, under each synthetic condition, per seed.

Arrival order matters for a KV rule: it reads the preferred engine's KV use when the long request
arrives, so that engine must already be serving something. In the main workload (`synthetic`) the
shorts arrive over `spread_s` seconds (the first at 0) and the long request `long_gap_s` after the
`long_after`-th short; the shorts after it meet its prefill. `synthetic-long-first` is the seed's literal
order (long at 0 on an idle cluster, the shorts `long_gap_s` later at the same offsets), where the rule
cannot fire but make-room still can. Both orders use the same draws. Each short also runs alone (`alone`).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np

from flatshare.admission.cluster import ClusterRun, run_cluster
from flatshare.admission.plan import (
    LONG_PRIORITY,
    MAKE_ROOM,
    SAGE,
    SHORT_PRIORITY,
    AdmissionPlan,
    Condition,
    SyntheticPlan,
)
from flatshare.admission.runs import run_dir, save_run
from flatshare.policy.policies import make_policy
from flatshare.policy.routing import Thresholds
from flatshare.sim.config import EngineConfig
from flatshare.sim.profile import load_profile
from flatshare.workloads.model import Session, Workload, WorkloadRequest
from flatshare.workloads.tokens import unique_span

MAIN, LONG_FIRST, ALONE = "synthetic", "synthetic-long-first", "alone"


def _request(rid: str, cls: str, prompt: int, max_tokens: int, t: float, seed: int) -> WorkloadRequest:
    return WorkloadRequest(
        id=rid,
        session_id=rid,
        cls=cls,
        priority=LONG_PRIORITY if cls == "long" else SHORT_PRIORITY,
        prompt=(unique_span(f"admission/{seed}/{rid}", prompt),),
        max_tokens=max_tokens,
        pause_before_s=t,
        arrival_s=t,
    )


def synthetic_workload(plan: SyntheticPlan, seed: int, long_first: bool = False) -> Workload:
    """The seed's case drawn with `seed` (module docstring); request ids `long/0`, `short/1`..."""
    rng = np.random.default_rng([seed, 0xAD31])
    low, high = plan.short_prompt
    prompts = rng.integers(low, high + 1, size=plan.shorts)
    outputs = rng.integers(min(16, plan.short_max_tokens), plan.short_max_tokens + 1, size=plan.shorts)
    arrivals = np.sort(np.concatenate([[0.0], rng.uniform(0.0, plan.spread_s, size=plan.shorts - 1)]))
    if long_first:
        long_t, arrivals = 0.0, arrivals + plan.long_gap_s
    else:
        long_t = float(arrivals[plan.long_after - 1]) + plan.long_gap_s
    requests = [_request("long/0", "long", plan.long_tokens, plan.long_max_tokens, long_t, seed)]
    requests += [
        _request(f"short/{i + 1}", "short", int(prompts[i]), int(outputs[i]), float(arrivals[i]), seed)
        for i in range(plan.shorts)
    ]
    requests.sort(key=lambda r: (r.arrival_s, r.id))
    sessions = tuple(Session(r.id, r.cls, r.pause_before_s, (r,)) for r in requests)
    return Workload(LONG_FIRST if long_first else MAIN, sessions, seed)


def engine_config(base: EngineConfig, condition: Condition) -> EngineConfig:
    """The engines of a condition: make-room (priority policy, shorts protected), sage (the plan's policy,
    FCFS: sage's rank alone orders the queue) or vLLM as configured."""
    if condition.sage:
        return base.with_changes(scheduler="sage", additional_config={"sage": dict(SAGE)})
    if not condition.make_room:
        return base
    return base.with_changes(
        scheduler="make-room", policy="priority", additional_config={"make_room": dict(MAKE_ROOM)}
    )


def condition_facts(condition: Condition) -> dict[str, Any]:
    return dataclasses.asdict(condition)


def thresholds_json(thresholds: Thresholds | None) -> dict[str, Any] | None:
    return None if thresholds is None else dataclasses.asdict(thresholds)


def _facts(
    plan: AdmissionPlan, workload: str, condition: Condition, seed: int, engines: int
) -> dict[str, Any]:
    config = engine_config(plan.engine, condition)
    return {
        "workload": workload,
        "part": ALONE if condition.key == ALONE else "synthetic",
        "engines": engines,
        "condition": condition_facts(condition),
        "seed": seed,
        "thresholds": thresholds_json(plan.synthetic.thresholds),
        "long_input_tokens": plan.synthetic.thresholds.input_tokens,
        "replay_s": None,
        "eval_from_s": 0.0,
        "engine_config": config.to_json(),
        "profile": plan.profile,
    }


ALONE_GAP_S = 60.0


def _alone(plan: AdmissionPlan, workload: Workload) -> ClusterRun:
    """Each short request alone: one engine of the same configuration, the shorts `ALONE_GAP_S` apart so
    each finds it idle (prompts are unique, so nothing is found cached): the same as a fresh engine."""
    shorts = [r for r in workload.requests() if r.cls == "short"]
    spaced = [
        dataclasses.replace(r, pause_before_s=i * ALONE_GAP_S, arrival_s=i * ALONE_GAP_S)
        for i, r in enumerate(shorts)
    ]
    alone = Workload(
        f"{workload.name}-alone", tuple(Session(r.id, r.cls, r.pause_before_s, (r,)) for r in spaced)
    )
    return run_cluster(alone, plan.engine, load_profile(plan.profile), 1, make_policy("first"))


def run_synthetic_seed(out: Path, plan: AdmissionPlan, seed: int) -> list[str]:
    """Run every synthetic condition (and the shorts alone) for one seed; returns the saved folders."""
    synth = plan.synthetic
    profile = load_profile(plan.profile)
    folders = []
    orders = [(MAIN, False, synth.conditions)]
    if synth.long_first:
        orders.append((LONG_FIRST, True, synth.conditions))
    for name, long_first, conditions in orders:
        workload = synthetic_workload(synth, seed, long_first)
        for condition in conditions:
            policy = make_policy(condition.routing_policy, synth.thresholds, condition.prefer, seed)
            config = engine_config(plan.engine, condition)
            cluster = run_cluster(
                workload, config, profile, synth.engines, policy, tick_s=plan.occupancy_tick_s
            )
            folder = run_dir(out, name, condition.key, seed)
            save_run(folder, cluster, _facts(plan, name, condition, seed, synth.engines))
            folders.append(str(folder))
    alone = Condition(ALONE, "first")
    folder = run_dir(out, MAIN, ALONE, seed)
    save_run(folder, _alone(plan, synthetic_workload(synth, seed)), _facts(plan, MAIN, alone, seed, 1))
    folders.append(str(folder))
    return folders
