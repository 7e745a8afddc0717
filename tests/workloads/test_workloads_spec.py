from __future__ import annotations

import re
from pathlib import Path

import pytest

from flatshare.errors import InputError
from flatshare.policy.classes import DEFAULT_PRIORITY
from flatshare.workloads.spec import parse_spec
from flatshare.workloads.tokens import Span
from flatshare.workloads.traces.weka import read_sessions


def test_voice_agents() -> None:
    w = parse_spec("voice-agents:callers=2,agents=4,duration=120", seed=3)
    classes = {s.cls for s in w.sessions}
    assert classes == {"voice", "agent"}
    assert sum(s.cls == "voice" for s in w.sessions) == 2
    assert sum(s.cls == "agent" for s in w.sessions) == 4
    assert w == parse_spec("voice-agents:callers=2,agents=4,duration=120", seed=3)
    assert w != parse_spec("voice-agents:callers=2,agents=4,duration=120", seed=4)


def test_voice_agents_can_replay_the_weka_sessions(traces_dir: Path) -> None:
    trace = traces_dir / "claude-code-weka-sample" / "sample_trace_with_subagent.json"
    spec = f"voice-agents:callers=2,agents=12,duration=600,agent_source=weka,agent_trace={trace}"
    w = parse_spec(spec, seed=3)
    assert w == parse_spec(spec, seed=3)
    agents = [s for s in w.sessions if s.cls == "agent"]
    assert len(agents) == 12 and sum(s.cls == "voice" for s in w.sessions) == 2
    _, raw = read_sessions(trace)
    recorded = {(c.n_in, max(1, c.n_out), c.think_s) for s in raw for c in s.calls}
    keys: list[set[str]] = []
    for s in agents:
        assert 0 <= s.start_s < 30 and s.requests[0].pause_before_s == s.start_s
        for prev, r in zip(s.requests, s.requests[1:], strict=False):
            assert r.priority == DEFAULT_PRIORITY["agent"] and r.arrival_s is not None and r.arrival_s < 600
            # a recorded call (its size, output and pause), or the next session's first (a fresh context)
            assert (r.prompt_tokens, r.max_tokens, r.pause_before_s) in recorded or (
                r.prompt_tokens < prev.prompt_tokens and r.pause_before_s > 0
            )
        keys.append({span.key for r in s.requests for span in r.prompt if isinstance(span, Span)})
    # agents replay the sessions back to back (not one ~100 s session each), and never share token ids
    assert sum((s.requests[-1].arrival_s or 0) > 300 for s in agents) >= 9
    assert all(not (a & b) for i, a in enumerate(keys) for b in keys[i + 1 :])
    assert agents[0].requests[0].prompt_token_ids[:64] != agents[5].requests[0].prompt_token_ids[:64]
    capped = parse_spec(spec, seed=3, max_model_len=16384)
    assert max(r.prompt_tokens + r.max_tokens for r in capped.requests()) <= 16384
    assert parse_spec(spec + ",agents=3").n_requests < w.n_requests


def test_long_short_and_model_len() -> None:
    w = parse_spec("long-short:long=50000,shorts=10", seed=1)
    assert w.n_requests == 11
    clipped = parse_spec("long-short:long=50000,shorts=2,max_model_len=8192", seed=1)
    assert max(r.prompt_tokens + r.max_tokens for r in clipped.requests()) <= 8192
    assert parse_spec("agents:n=2,duration=60,warm=false", seed=1).n_requests > 2


def test_traces(traces_dir: Path) -> None:
    azure = traces_dir / "azure-llm-2023"
    assert parse_spec(f"azure:{azure / 'AzureLLMInferenceTrace_conv.csv'},limit=10").n_requests == 10
    code = parse_spec(f"azure-code:{azure / 'AzureLLMInferenceTrace_code.csv'},duration=60,rate=2")
    assert all(r.cls == "code" and (r.arrival_s or 0) < 30 for r in code.requests())
    moon = parse_spec(f"mooncake:{traces_dir / 'mooncake-fast25' / 'synthetic_trace.jsonl'}")
    assert moon.n_requests == 3993
    weka = traces_dir / "claude-code-weka-sample" / "sample_trace_with_subagent.json"
    assert parse_spec(f"weka:{weka},copies=2,stagger=30").n_requests == 180


def test_sharegpt(tmp_path: Path) -> None:
    path = tmp_path / "sg.json"
    path.write_text(
        '[{"id": "a", "conversations": [{"from": "human", "value": "hi"}, {"from": "gpt", "value": "yo"}]}]'
    )
    assert parse_spec(f"sharegpt:{path},conv_rate=2,multi_turn=false").n_requests == 1


@pytest.mark.parametrize(
    ("spec", "match"),
    [
        ("voice-agent:callers=2", r"unknown workload 'voice-agent'; valid: voice-agents, voice, agents"),
        (
            "voice-agents:callers=2,agent=3",
            r"unknown setting 'agent=3' for voice-agents; valid keys: .*agents",
        ),
        ("long-short:long=big", r"long expects int, got 'big'"),
        ("agents:n=2,warm=maybe", r"warm expects bool"),
        ("azure", r"azure needs a path"),
        ("azure:/nonexistent/file.csv", r"no such file"),
        ("agents:n=0", r"coding_agents needs n >= 1"),
        ("voice-agents:agent_source=replay", r"agent_source must be one of synthetic, weka, got 'replay'"),
        ("agents:agent_trace=x.json", r"agent_trace is read only with agent_source=weka"),
        ("agents:agent_source=weka,agent_trace=/nonexistent.json", r"no such file"),
        ("mooncake:x.jsonl,speed=2", r"unknown setting 'speed=2' for mooncake; valid keys: duration, limit"),
    ],
)
def test_bad_specs(spec: str, match: str) -> None:
    with pytest.raises(InputError, match=match):
        parse_spec(spec)


# -- bounds (issue 32, item 10) ---------------------------------------------------------------------------
@pytest.mark.timeout(60)  # a guard against the hang these reproduce, not a timing target
@pytest.mark.parametrize(
    "spec, words",
    [
        ("voice:callers=100000000,duration=1e9", "callers must lie in [0, 1e+06]"),
        ("voice:callers=3000,duration=100000", "session-seconds"),
        ("agents:n=2,duration=100000000", "duration must lie in [0, 1e+07]"),
        ("voice-agents:callers=100,agents=2000,duration=9000", "session-seconds"),
        ("voice:duration=nan", "duration must lie"),
        ("voice:duration=inf", "duration must lie"),
        ("voice:stagger=-1", "stagger must lie"),
        ("long-short:long=100000000", "long must lie in [0, 1e+07]"),
        ("voice:turns=10000000", "turns must lie"),
    ],
)
def test_absurd_sizes_are_refused_before_anything_is_built(spec: str, words: str) -> None:
    from flatshare.workloads.spec import check_spec

    for check in (check_spec, parse_spec):
        with pytest.raises(InputError, match=re.escape(words)):
            check(spec)


def test_the_bounds_leave_room_for_real_workloads() -> None:
    from flatshare.workloads.spec import check_spec

    for spec in ("voice:callers=1000,duration=10000", "voice-agents:callers=64,agents=256,duration=3600"):
        check_spec(spec)


# -- the typed spec ------------------------------------------------------------------------------------------
def test_a_typed_spec_builds_what_its_text_names_and_reads_back_equal() -> None:
    from flatshare.workloads.spec import WorkloadSpec, read_spec

    spec = WorkloadSpec("voice-agents", {"callers": 2, "agents": 4, "duration": 120.0, "voice_system": 900})
    assert str(spec) == "voice-agents:callers=2,agents=4,duration=120.0,voice_system=900"
    assert read_spec(str(spec)) == spec
    assert spec.build(3) == parse_spec(str(spec), seed=3)
    trace = WorkloadSpec("sharegpt", {"start": 0.0, "duration": 30, "rate": 2.0})
    assert str(trace) == "sharegpt:start=0.0,duration=30,rate=2.0" and read_spec(str(trace)) == trace
    assert str(WorkloadSpec("weka", {"copies": 2}, "a,b.json")) == "weka:a,b.json,copies=2"
    assert read_spec("weka:a,b.json,copies=2").path == "a,b.json"


@pytest.mark.parametrize(
    "kind, settings, path, match",
    [
        ("voice-agent", {}, None, r"unknown workload 'voice-agent'"),
        ("voice", {"agents": 2}, None, r"unknown setting 'agents=2' for voice"),
        ("voice", {"callers": "2"}, None, r"callers expects int, got '2'"),
        ("voice", {"callers": True}, None, r"callers expects int, got True"),
        ("voice", {"duration": float("nan")}, None, r"duration must lie in \[0, 1e\+07\]"),
        ("voice", {"callers": 3000, "duration": 100000}, None, r"session-seconds"),
        ("azure", {}, None, r"azure needs a path"),
        ("voice", {}, "x.csv", r"voice takes no path"),
    ],
)
def test_a_typed_spec_is_checked_as_its_text_would_be(
    kind: str, settings: dict[str, object], path: str | None, match: str
) -> None:
    from flatshare.workloads.spec import WorkloadSpec

    with pytest.raises(InputError, match=match):
        WorkloadSpec(kind, settings, path)
