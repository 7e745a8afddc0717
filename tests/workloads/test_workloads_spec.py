from __future__ import annotations

from pathlib import Path

import pytest

from flatshare.errors import InputError
from flatshare.workloads.spec import parse_spec


def test_voice_agents() -> None:
    w = parse_spec("voice-agents:callers=2,agents=4,duration=120", seed=3)
    classes = {s.cls for s in w.sessions}
    assert classes == {"voice", "agent"}
    assert sum(s.cls == "voice" for s in w.sessions) == 2
    assert sum(s.cls == "agent" for s in w.sessions) == 4
    assert w == parse_spec("voice-agents:callers=2,agents=4,duration=120", seed=3)
    assert w != parse_spec("voice-agents:callers=2,agents=4,duration=120", seed=4)


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
        ("mooncake:x.jsonl,speed=2", r"unknown setting 'speed=2' for mooncake; valid keys: duration, limit"),
    ],
)
def test_bad_specs(spec: str, match: str) -> None:
    with pytest.raises(InputError, match=match):
        parse_spec(spec)
