from __future__ import annotations

import json
from pathlib import Path
from statistics import median
from typing import Any

import pytest

from flatshare.workloads.synth import AgentProfile, coding_agents
from flatshare.workloads.tokens import prompt_ids


def sample_calls(traces_dir: Path) -> list[dict[str, float]]:
    """Every model call of the WEKA sample with sub-agents, with its index `k` in its own session."""
    data = json.loads(
        (traces_dir / "claude-code-weka-sample" / "sample_trace_with_subagent.json").read_text()
    )
    calls: list[dict[str, float]] = []

    def walk(entries: list[dict[str, Any]]) -> None:
        mine = [e for e in entries if e.get("type") != "subagent"]
        calls.extend(
            {"in": e["in"], "out": e["out"], "think": e["think_time"], "k": k} for k, e in enumerate(mine)
        )
        for e in entries:
            if e.get("type") == "subagent":
                walk(e["requests"])

    walk(data["requests"])
    return calls


def test_synthesized_medians_match_the_weka_sample(traces_dir: Path) -> None:
    calls = sample_calls(traces_dir)
    assert len(calls) == 90
    want_in = median(c["in"] for c in calls)
    want_out = median(c["out"] for c in calls)
    want_think = median(c["think"] for c in calls if c["k"] > 0)
    ins: list[int] = []
    outs: list[int] = []
    thinks: list[float] = []
    for seed in range(4):
        for s in coding_agents(24, 1200, seed).sessions:
            ins += [r.prompt_tokens for r in s.requests]
            outs += [r.max_tokens for r in s.requests]
            thinks += [r.pause_before_s for r in s.requests[1:]]
    assert len(ins) > 4000
    assert median(ins) == pytest.approx(want_in, rel=0.10)
    assert median(outs) == pytest.approx(want_out, rel=0.10)
    assert median(thinks) == pytest.approx(want_think, rel=0.10)
    assert min(ins) >= 8_000 and max(ins) <= 90_000


def test_consecutive_calls_share_their_prefix() -> None:
    session = coding_agents(1, 900, seed=3, warm_start=False).sessions[0]
    first_prompt = session.requests[0].prompt
    base = first_prompt[0].length
    full = 0
    for a, b in zip(session.requests, session.requests[1:], strict=False):
        if b.prompt[: len(a.prompt)] == a.prompt:
            full += 1
        else:  # a new episode: only the agent's system prompt and tools are shared
            assert b.prompt[0] == first_prompt[0]
    assert full >= 0.8 * (len(session.requests) - 1)
    a, b = session.requests[0], session.requests[1]
    assert b.prompt_token_ids[: a.prompt_tokens] == a.prompt_token_ids
    assert len(a.prompt_token_ids) > base


def test_seed_determines_the_workload() -> None:
    assert coding_agents(3, 300, seed=5) == coding_agents(3, 300, seed=5)
    assert coding_agents(3, 300, seed=5) != coding_agents(3, 300, seed=6)
    other = coding_agents(1, 300, seed=6).sessions[0].requests[0]
    mine = coding_agents(1, 300, seed=5).sessions[0].requests[0]
    assert prompt_ids(mine.prompt[:1])[:100] != prompt_ids(other.prompt[:1])[:100]


def test_sessions_fit_duration_model_len_and_priority() -> None:
    w = coding_agents(6, 600, seed=1, max_model_len=16384, stagger_s=60, priority=7, vocab_size=512)
    assert len(w.sessions) == 6 and all(0 <= s.start_s < 60 for s in w.sessions)
    for r in w.requests():
        assert r.prompt_tokens + r.max_tokens <= 16384
        assert r.priority == 7 and r.cls == "agent"
        assert r.arrival_s is not None and r.arrival_s < 600
    assert max(w.sessions[0].requests[1].prompt_token_ids) < 512


def test_common_prefix_is_shared_by_all_agents() -> None:
    w = coding_agents(3, 120, seed=2, common_prefix_tokens=2000)
    heads = {s.requests[0].prompt_token_ids[:2000] for s in w.sessions}
    assert len(heads) == 1
    assert len({s.requests[0].prompt_token_ids[2000:2100] for s in w.sessions}) == 3


def test_profile_rejects_bad_values() -> None:
    with pytest.raises(ValueError, match="small_step_p"):
        AgentProfile(small_step_p=1.5)
    with pytest.raises(ValueError, match="final_context_low"):
        AgentProfile(final_context_low=9, final_context_high=5)
