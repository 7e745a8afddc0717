"""tools/step_mix.py: what the steps that decode a voice reply carry, and how long they take by the number
of agent prefills in them (the seed's 60-66 ms "beside three long agent prefills")."""

from __future__ import annotations

import math
from types import ModuleType

import pytest

pytestmark = pytest.mark.vllm  # the tool imports the simulated engine


def test_step_times_are_grouped_by_the_agent_prefills_in_the_step(step_mix: ModuleType) -> None:
    mix = step_mix.StepMix(
        voice_decode_steps=7,
        voice_step_s_by_prefills={0: [0.020, 0.022, 0.021], 1: [0.090], 3: [0.100], 4: [0.120, 0.140]},
    )
    report = mix.report(virtual_s=10.0)
    assert report["voice_decode_step_ms_median_with_no_agent_prefill"] == 21.0
    assert report["voice_decode_step_ms_median_with_1_agent_prefill"] == 90.0
    assert math.isnan(report["voice_decode_step_ms_median_with_2_agent_prefill"])
    assert report["voice_decode_steps_with_2_agent_prefill"] == 0
    assert report["voice_decode_step_ms_median_with_3+_agent_prefill"] == 120.0
    assert report["voice_decode_steps_with_3+_agent_prefill"] == 3


def test_a_short_stock_run_accounts_for_every_voice_decode_step(step_mix: ModuleType) -> None:
    report = step_mix.step_mix("vllm-priority", seed=0, duration_s=120.0, changes={})
    by_prefills = sum(
        report[f"voice_decode_steps_with_{label}_agent_prefill"] for label in ("no", "1", "2", "3+")
    )
    assert by_prefills == report["voice_decode_steps"] > 0
    with_one = report["voice_decode_step_ms_median_with_1_agent_prefill"]
    without = report["voice_decode_step_ms_median_with_no_agent_prefill"]
    # A step with a 512-token agent chunk costs several decode-only steps on the 24 GB profile.
    assert with_one > 2 * without > 0
