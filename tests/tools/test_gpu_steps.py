"""tools/gpu_steps.py: the H200 profile and its page are what the committed measurement gives, and the
profile's linear part holds every measured pass (the fit's rows and the 8,192-token prediction)."""

from __future__ import annotations

from types import ModuleType

from flatshare.sim.gpu_steps import read_steps
from flatshare.sim.linear_fit import point_errors
from flatshare.sim.profile import load_profile


def test_the_profile_and_page_are_current(gpu_steps: ModuleType) -> None:
    assert gpu_steps.main(["--check"]) == 0, "rerun tools/gpu_steps.py"


def test_the_linear_part_is_within_10_percent_of_every_measured_pass(gpu_steps: ModuleType) -> None:
    m = read_steps(gpu_steps.REPO / gpu_steps.DATA)
    linear = load_profile("h200-llama3-8b").linear
    assert linear is not None
    errors = point_errors(linear, m.measured(gpu_steps.H200, max_tokens=10**9))
    assert [e.tokens for e in errors][-1] == 8192
    assert not [(e.tokens, round(e.error, 3)) for e in errors if abs(e.error) > 0.10]


def test_attention_terms_are_the_measured_ones_not_the_derived(gpu_steps: ModuleType) -> None:
    profile = load_profile("h200-llama3-8b")
    assert any(s.startswith("prefill_attn_pair_s: FITTED") for s in profile.sources)
    assert any(s.startswith("decode_ctx_token_s: FITTED") for s in profile.sources)
