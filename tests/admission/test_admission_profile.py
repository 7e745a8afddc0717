"""The seed's hardware profile (Llama-3-8B on an A100-80GB): derived, cited, and big enough for 50k."""

from __future__ import annotations

import pytest

from flatshare.admission.attribution import expected_ttft_s
from flatshare.admission.plan import PROFILE, default_engine
from flatshare.sim.profile import load_profile

pytestmark = pytest.mark.vllm


def test_the_a100_profile_is_cited_as_derived_and_matches_the_engines() -> None:
    profile = load_profile(PROFILE)
    assert any("Derived, not measured" in s for s in profile.sources)
    assert profile.default_kv_tokens == default_engine().kv_tokens == 434_176
    assert profile.kv_bytes_per_token == 32 * 8 * 128 * 2 * 2
    assert default_engine().max_model_len >= 50_000 + 256


def test_shorts_take_under_200_ms_alone_and_the_long_prefill_takes_seconds() -> None:
    profile = load_profile(PROFILE)
    budget = default_engine().max_num_batched_tokens
    assert expected_ttft_s(500, profile, budget) < 0.2
    assert 4.0 < expected_ttft_s(50_000, profile, budget) < 12.0
