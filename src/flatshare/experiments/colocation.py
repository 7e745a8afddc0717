"""The co-location experiment: a voice agent beside coding agents, under each scheduling condition.

Conditions share one workload per (callers, seed): `voice-agents` calls and agent sessions; `alone`
keeps only the voice sessions and `agents-alone` only the agents, so every condition sees the same
requests. Each runs on the simulated engine (vLLM's own scheduler, stock or make-room) for `duration`
virtual seconds (no request issued later; in-flight ones get `drain` more seconds).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from flatshare.experiments.runs import run_dir, save_run
from flatshare.experiments.setup import SEED, Setup

WINDOW_SWEEP = (0, 8, 16, 24, 32, 48, 64)


@dataclass(frozen=True)
class Condition:
    key: str
    scheduler: str = "vllm"
    policy: str = "priority"
    make_room: dict[str, Any] | None = None
    max_num_batched_tokens: int = 512
    voice: bool = True
    agents: bool = True
    window_tokens: int | None = None  # for the window sweep


def _mr(window: int, **more: Any) -> dict[str, Any]:
    return {"enabled": True, "window_tokens": window, **more}


MAIN_CONDITIONS = (
    Condition("alone", agents=False),
    Condition("agents-alone", voice=False),
    Condition("vllm-fcfs", policy="fcfs"),
    Condition("vllm-priority"),
    Condition("make-room-preempt", "make-room", make_room=_mr(0), window_tokens=0),
    Condition("make-room-t16", "make-room", make_room=_mr(16), window_tokens=16),
    Condition("make-room-t48", "make-room", make_room=_mr(48), window_tokens=48),
    Condition("make-room-t48-decode", "make-room", make_room=_mr(48, hold_decode=True)),
    Condition("vllm-priority-256", max_num_batched_tokens=256),
    Condition("make-room-t48-256", "make-room", make_room=_mr(48), max_num_batched_tokens=256),
    Condition(
        "make-room-t48-256-decode",
        "make-room",
        make_room=_mr(48, hold_decode=True),
        max_num_batched_tokens=256,
    ),
)
SWEEP_CONDITIONS = tuple(
    Condition(f"make-room-t{t}", "make-room", make_room=_mr(t), window_tokens=t) for t in (8, 24, 32, 64)
)


@dataclass(frozen=True)
class ColocationPlan:
    callers: tuple[int, ...] = (2, 4, 6)
    agents: int = 24
    seeds: int = 5
    duration_s: float = 600.0
    drain_s: float = 120.0
    setup: Setup = SEED
    conditions: tuple[Condition, ...] = MAIN_CONDITIONS + SWEEP_CONDITIONS
    workers: int = field(default_factory=lambda: max(1, min(2, os.cpu_count() or 1)))

    def __post_init__(self) -> None:
        if not self.callers or min(self.callers) < 1 or self.agents < 1 or self.seeds < 1:
            raise ValueError("callers, agents and seeds must be >= 1")
        if self.duration_s <= 0:
            raise ValueError("duration must be > 0")

    def jobs(self) -> Iterator[tuple[Condition, int, int]]:
        for callers in self.callers:
            for seed in range(self.seeds):
                for condition in self.conditions:
                    if condition.voice or callers == self.callers[0]:
                        yield condition, callers, seed


QUICK = ColocationPlan(callers=(2,), seeds=2, duration_s=300.0, drain_s=60.0)


def engine_config(condition: Condition, setup: Setup) -> Any:
    """The simulated engine's settings for one condition under `setup`."""
    from flatshare.sim.config import EngineConfig
    from flatshare.sim.profile import load_profile

    kv_tokens = setup.kv_tokens or load_profile(setup.profile).default_kv_tokens
    return EngineConfig(
        scheduler=condition.scheduler,
        policy=condition.policy,
        max_num_batched_tokens=condition.max_num_batched_tokens,
        additional_config={"make_room": condition.make_room} if condition.make_room else {},
        max_model_len=setup.max_model_len,
        kv_tokens=kv_tokens,
        cpu_tier_tokens=setup.cpu_tier_tokens,
        scheduler_reserve_full_isl=setup.reserve_full_isl,
    )


def workload_spec(callers: int, plan: ColocationPlan) -> str:
    spec = (
        f"voice-agents:callers={callers},agents={plan.agents},duration={plan.duration_s},"
        f"voice_system={plan.setup.voice_system_tokens}"
    )
    if plan.setup.agent_source != "synthetic":
        spec += f",agent_source={plan.setup.agent_source}"
    return spec


def run_one(out: Path, condition: Condition, callers: int, seed: int, plan: ColocationPlan) -> str:
    """Run one (condition, callers, seed) and save it; returns its folder. Imports vLLM."""
    from flatshare.replay.virtual import run_virtual
    from flatshare.sim.engine import SimEngine
    from flatshare.sim.profile import load_profile
    from flatshare.workloads.model import Workload
    from flatshare.workloads.spec import parse_spec

    config = engine_config(condition, plan.setup)
    profile = load_profile(plan.setup.profile)
    if plan.setup.api_latency_s is not None:
        profile = dataclasses.replace(profile, api_latency_s=plan.setup.api_latency_s)
    spec = workload_spec(callers, plan)
    full = parse_spec(spec, seed=seed, max_model_len=config.max_model_len)
    keep = {"voice"} if not condition.agents else {"agent"} if not condition.voice else {"voice", "agent"}
    workload = Workload(full.name, tuple(s for s in full.sessions if s.cls in keep), full.seed)
    engine = SimEngine(config, profile)
    run = run_virtual(workload, [engine], until_s=plan.duration_s, stop_s=plan.duration_s + plan.drain_s)
    folder = run_dir(out, condition.key, callers, seed)
    facts = {
        "engine_config": config.to_json(),
        "setup": plan.setup.to_json(),
        "api_latency_s": profile.api_latency_s,
        "spec": spec,
        "duration_s": plan.duration_s,
        "seed": seed,
    }
    save_run(folder, run, facts)
    return str(folder)


def run_plan(out: Path, plan: ColocationPlan, on_done: Callable[[str], None] | None = None) -> None:
    """Run every job of the plan (in `plan.workers` processes) and save each run."""
    jobs = list(plan.jobs())
    if plan.workers <= 1:
        for condition, callers, seed in jobs:
            folder = run_one(out, condition, callers, seed, plan)
            if on_done:
                on_done(folder)
        return
    with ProcessPoolExecutor(max_workers=plan.workers) as pool:
        futures = [pool.submit(run_one, out, c, n, s, plan) for c, n, s in jobs]
        for future in futures:
            folder = future.result()
            if on_done:
                on_done(folder)
