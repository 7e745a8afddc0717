"""The body of `flatshare experiment colocation`: plain arguments in, the plan to run out.

The CLI maps its options one to one onto `colocation_plan`: the engine's options as one `EngineOptions`
(the CLI's shared engine options, `flatshare.cli.engine_options`, whose defaults here are the write-up's
setup: `preset_engine_options(SEED)`), the setup's other settings (`None` keeps the preset's value), and
with `real` the real engine to run. Errors in the options raise `InputError` or `ValueError`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING

from flatshare.colocation.setup import SEED, Setup
from flatshare.sim.options import EngineOptions

if TYPE_CHECKING:
    from flatshare.colocation.experiment import ColocationPlan

ADMISSION_RULES = {"full-prompt": True, "first-chunk": False}
"""`--admission-rule`: vLLM's admission rule, as `Setup.reserve_full_isl`."""


def preset_engine_options(setup: Setup) -> EngineOptions:
    """The engine options a setup fixes (profile and token capacities): the co-location command's
    defaults."""
    return EngineOptions(
        profile=setup.profile,
        kv_tokens=setup.kv_tokens,
        max_model_len=setup.max_model_len,
        cpu_tier_tokens=setup.cpu_tier_tokens,
    )


PRESET_ENGINE_OPTIONS = ("profile", "kv_tokens", "max_model_len", "cpu_tier_tokens")
"""The engine options `experiment colocation` takes (the others are each condition's own)."""


@dataclass(frozen=True)
class SetupChanges:
    """The setup's settings beside the engine options, as given (None: the preset's value)."""

    admission_rule: str | None = None
    api_latency_s: float | None = None
    agent_source: str | None = None
    async_scheduling: bool | None = None
    long_prefill_token_threshold: int | None = None
    voice_warmup: bool | None = None
    scale: float | None = None
    asr_final_spread: float | None = None


def colocation_setup(engine: EngineOptions, changes: SetupChanges, base: Setup = SEED) -> Setup:
    """`base` with the engine options and the given changes."""
    rule = changes.admission_rule
    if rule is not None and rule not in ADMISSION_RULES:
        raise ValueError(f"--admission-rule must be full-prompt or first-chunk, got {rule!r}")
    given = {
        "reserve_full_isl": None if rule is None else ADMISSION_RULES[rule],
        "api_latency_s": changes.api_latency_s,
        "agent_source": changes.agent_source or None,
        "async_scheduling": changes.async_scheduling,
        "long_prefill_token_threshold": changes.long_prefill_token_threshold,
        "voice_warmup": changes.voice_warmup,
        "scale": changes.scale,
        "asr_final_spread": changes.asr_final_spread,
    }
    return base.with_changes(
        **{name: getattr(engine, name) for name in PRESET_ENGINE_OPTIONS},
        **{k: v for k, v in given.items() if v is not None},
    )


def _caller_counts(text: str) -> tuple[int, ...]:
    items = [c.strip() for c in text.split(",")]
    if not all(c.isdigit() and int(c) > 0 for c in items):
        raise ValueError(f"--callers must be positive integers, comma-separated, got {text!r}")
    return tuple(int(c) for c in items)


def colocation_plan(
    setup: Setup,
    *,
    quick: bool,
    real: bool,
    callers: str | None,
    agents: int | None,
    seeds: int | None,
    duration: float | None,
    drain: float | None,
    workers: int,
    conditions: str | None,
) -> ColocationPlan:
    """The plan: the quick one (`QUICK`, or `REAL_QUICK` on real engines) or the full one on `setup`, with
    the given callers, agents, seeds, duration, drain, workers and conditions (None or 0: the plan's own);
    ValueError on caller counts that are not positive integers."""
    from flatshare.colocation.experiment import (
        QUICK,
        REAL_QUICK,
        ColocationPlan,
        engine_config,
        pick_conditions,
    )

    plan = (REAL_QUICK if real else QUICK) if quick else ColocationPlan()
    plan = dataclasses.replace(
        plan,
        setup=setup,
        callers=plan.callers if callers is None else _caller_counts(callers),
        agents=plan.agents if agents is None else agents,
        seeds=plan.seeds if seeds is None else seeds,
        duration_s=plan.duration_s if duration is None else duration,
        drain_s=plan.drain_s if drain is None else drain,
    )
    if workers:
        plan = dataclasses.replace(plan, workers=workers)
    if conditions is not None:
        plan = dataclasses.replace(plan, conditions=pick_conditions(conditions))
    engine_config(plan.conditions[0], setup)  # the engine's own checks (max model length vs KV), now
    return plan


def quick_scale(quick: bool, real: bool) -> float | None:
    """`--quick`'s scale when `--scale` is left out: the quick plan's (0.05 on real engines)."""
    from flatshare.colocation.experiment import QUICK, REAL_QUICK

    return (REAL_QUICK if real else QUICK).setup.scale if quick else None
