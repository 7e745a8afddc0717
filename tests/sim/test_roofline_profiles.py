"""The measured-card profiles against the measured timings (../shared/gpu-profiles, read by path), the
docs' error table against what the profiles give now, and the seed's facts under the 24 GB profiles."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from flatshare.sim.error_table import current_table, error_table
from flatshare.sim.linear_fit import point_errors
from flatshare.sim.measured import CARDS, read_measured, shared_dir
from flatshare.sim.profile import ScheduledWork, StepTimeProfile, load_profile

DOC = Path(__file__).resolve().parents[2] / "docs" / "step-model.md"
needs_data = pytest.mark.skipif(
    not (shared_dir() / "gpu-profiles" / "vidur").is_dir(),
    reason=f"the measured GPU timings are not beside the checkout ({shared_dir() / 'gpu-profiles'})",
)


@needs_data
@pytest.mark.parametrize("card", CARDS, ids=[c.profile for c in CARDS])
def test_linear_part_is_within_10_percent_of_every_measured_median(card) -> None:  # type: ignore[no-untyped-def]
    measured = read_measured(card)
    assert measured.tokens[0] == 1 and measured.tokens[-1] == 4096 and len(measured.tokens) > 250
    linear = load_profile(card.profile).linear
    assert linear is not None
    bad = [(e.tokens, round(e.error, 3)) for e in point_errors(linear, measured) if abs(e.error) > 0.10]
    assert not bad


@needs_data
def test_the_docs_error_table_is_what_the_profiles_give_now() -> None:
    assert current_table(DOC.read_text()) == error_table(), "rerun tools/step_fit.py"


def _facts(profile: StepTimeProfile) -> tuple[float, float, float, float]:
    """Lone decode step, a 512-token chunk beside 3 decodes, recomputing 16k tokens in 512-token chunks,
    loading a cached 16k context."""
    decode = profile.step_time([ScheduledWork(1, 300, True)])
    chunk = profile.step_time([ScheduledWork(512, 0, False), *[ScheduledWork(1, 250, True)] * 3])
    recompute = sum(
        profile.step_time([ScheduledWork(min(512, 16000 - d), d, False)]) for d in range(0, 16000, 512)
    )
    return decode, chunk, recompute, profile.load_time(16384)


def test_the_additive_24gb_profile_meets_the_seeds_facts() -> None:
    decode, chunk, recompute, cached = _facts(load_profile("llama3-8b-24gb"))
    assert 0.016 <= decode <= 0.020 and 0.055 <= chunk <= 0.070 and recompute > 3.0 and cached < 0.12


def test_the_spec_derived_roofline_24gb_profile_misses_three_facts_as_the_docs_say() -> None:
    """At the efficiencies measured on the A40, an RTX 4090 decodes at ~22 ms a token (seed: 16-20), a
    512-token chunk step takes ~79 ms (seed: 55-70) and recomputing 16k tokens ~2.98 s (seed: > 3);
    finding it cached still takes ~0.09 s. docs/step-model.md says why."""
    decode, chunk, recompute, cached = _facts(load_profile("llama3-8b-24gb-roofline"))
    assert 0.021 < decode < 0.024
    assert 0.075 < chunk < 0.085
    assert 2.8 < recompute < 3.0
    assert cached < 0.12


def test_a_setting_of_the_roofline_model_meets_all_the_seeds_facts_together() -> None:
    """The facts are consistent with the model at 85% of the 4090's bandwidth, 80% of its FLOP/s and
    attention at 30% of peak: more than any measured card achieves on its linear work (71-74%, 64-70%)."""
    base = load_profile("llama3-8b-24gb-roofline")
    assert base.linear is not None
    linear = dataclasses.replace(base.linear, mem_bytes_per_s=0.85 * 1008e9, flops_per_s=0.80 * 165.2e12)
    tuned = dataclasses.replace(
        base,
        linear=linear,
        step_fixed_s=1.05e9 / linear.mem_bytes_per_s + 0.001,
        prefill_attn_pair_s=4 * 4096 * 32 / (0.30 * 165.2e12),
    )
    decode, chunk, recompute, cached = _facts(tuned)
    assert 0.016 <= decode <= 0.020 and 0.055 <= chunk <= 0.070 and recompute > 3.0 and cached < 0.12
