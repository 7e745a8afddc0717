"""Scaling a workload's token counts: every count scales, prefixes stay shared, timing is kept."""

from __future__ import annotations

import pytest

from flatshare.workloads.scale import check_scale, scale_workload, scaled
from flatshare.workloads.spec import parse_spec


def test_every_token_count_scales_and_timing_is_kept() -> None:
    full = parse_spec("voice-agents:callers=2,agents=3,duration=120", seed=1, max_model_len=16384)
    small = scale_workload(full, 0.05, max_model_len=819)
    assert small.n_requests == full.n_requests
    for big_s, small_s in zip(full.sessions, small.sessions, strict=True):
        assert small_s.start_s == big_s.start_s
        if big_s.speech_tokens_per_s is not None:
            assert small_s.speech_tokens_per_s == pytest.approx(big_s.speech_tokens_per_s * 0.05)
        for big, r in zip(big_s.requests, small_s.requests, strict=True):
            assert r.pause_before_s == big.pause_before_s
            assert r.prompt_tokens + r.max_tokens <= 819
            assert abs(r.prompt_tokens - big.prompt_tokens * 0.05) <= len(big.prompt) + 1
            assert (
                r.max_tokens == max(1, round(big.max_tokens * 0.05)) or r.prompt_tokens + r.max_tokens == 819
            )
            if big.first_sentence_tokens is not None:
                assert 1 <= (r.first_sentence_tokens or 0) <= r.max_tokens


def test_a_shared_prefix_stays_shared() -> None:
    full = parse_spec("voice-agents:callers=1,agents=2,duration=120", seed=0, max_model_len=16384)
    small = scale_workload(full, 0.1, max_model_len=1638)
    agent = next(s for s in small.sessions if s.cls == "agent")
    first, second = agent.requests[0].prompt_token_ids, agent.requests[1].prompt_token_ids
    shared = next((i for i, (a, b) in enumerate(zip(first, second, strict=False)) if a != b), len(first))
    assert shared >= 0.9 * len(first)  # the next turn resends the context: its head is the same tokens


def test_scale_one_is_the_workload_itself_and_bad_factors_are_refused() -> None:
    full = parse_spec("voice:callers=1,duration=30", seed=0)
    assert scale_workload(full, 1.0) is full
    for bad in (0, -0.5, 1.5, float("nan"), True):
        with pytest.raises(ValueError, match="scale"):
            check_scale(bad)
    assert scaled(16000, 0.05) == 800 and scaled(3, 0.05) == 1 and scaled(0, 0.5) == 0
