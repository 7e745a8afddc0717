from __future__ import annotations

import json
from pathlib import Path

import pytest

from flatshare.errors import InputError
from flatshare.workloads.traces import TraceOptions, load_weka
from flatshare.workloads.traces.weka import read_sessions


def weka(traces_dir: Path, name: str = "sample_trace_with_subagent.json") -> Path:
    return traces_dir / "claude-code-weka-sample" / name


def test_sample_has_one_session_of_six_calls(traces_dir: Path) -> None:
    w = load_weka(weka(traces_dir, "sample_trace.json"))
    assert w.n_requests == 6 and len(w.sessions) == 1
    session = w.sessions[0]
    assert [r.pause_before_s for r in session.requests] == [0.0, 12.0, 15.0, 284.0, 12.0, 318.0]
    assert [r.prompt_tokens for r in session.requests][:3] == [21477, 21626, 21833]
    assert [r.arrival_s for r in session.requests] == [0.0, 17.0, 35.0, 337.0, 470.0, 799.0]
    assert all(r.cls == "agent" and r.priority == 10 for r in session.requests)


def test_subagents_are_their_own_sessions(traces_dir: Path) -> None:
    w = load_weka(weka(traces_dir))
    assert w.n_requests == 90
    assert sorted(len(s.requests) for s in w.sessions) == [6, 14, 21, 23, 26]
    starts = sorted(s.start_s for s in w.sessions)
    assert starts == pytest.approx([0.0, 185.091, 192.676, 202.643, 217.311])
    requests = list(w.requests())
    assert (
        min(r.prompt_tokens for r in requests) >= 10_000 and max(r.prompt_tokens for r in requests) < 90_000
    )


def test_consecutive_calls_share_their_leading_tokens(traces_dir: Path) -> None:
    w = load_weka(weka(traces_dir))
    session = max(w.sessions, key=lambda s: len(s.requests))
    for a, b in zip(session.requests[:5], session.requests[1:6], strict=True):
        shared = a.prompt_tokens // 64 * 64
        assert a.prompt_token_ids[:shared] == b.prompt_token_ids[:shared]
    # Sub-agents with the same system prompt share its blocks (global hash ids).
    subs = [s for s in w.sessions if s.start_s > 0]
    assert subs[0].requests[0].prompt_token_ids[:6000] == subs[1].requests[0].prompt_token_ids[:6000]


def test_copies_rate_and_clipping(traces_dir: Path) -> None:
    opts = TraceOptions(rate=2.0, max_model_len=32768)
    w = load_weka(weka(traces_dir), opts, copies=3, stagger_s=10.0)
    assert w.n_requests == 270 and len(w.sessions) == 15
    assert all(r.prompt_tokens + r.max_tokens <= 32768 for r in w.requests())
    firsts = [s.requests[0] for s in w.sessions if s.start_s in (0.0, 5.0)]
    assert len(firsts) == 2 and firsts[0].prompt_token_ids[:64] != firsts[1].prompt_token_ids[:64]
    top = next(s for s in w.sessions if s.start_s == 0.0)
    assert [r.pause_before_s for r in top.requests][:3] == [0.0, 6.0, 7.5]


def test_read_sessions_keeps_the_recorded_fields(traces_dir: Path) -> None:
    block, sessions = read_sessions(weka(traces_dir))
    assert block == 64
    assert sum(len(s.calls) for s in sessions) == 90
    assert sessions[0].calls[3].think_s == 284.0


def write(tmp_path: Path, data: object) -> Path:
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(data))
    return path


def call(**change: object) -> dict[str, object]:
    c: dict[str, object] = {"t": 0.0, "in": 130, "out": 5, "hash_ids": [1, 2], "think_time": 0.0}
    c.update(change)
    return c


@pytest.mark.parametrize(
    ("data", "match"),
    [
        ({"block_size": 64, "requests": [call(), call(out=-1)]}, r"requests\[1\]: field 'out'"),
        ({"block_size": 64, "requests": [call(hash_ids=[1])]}, r"requests\[0\]: field 'hash_ids': 1 blocks"),
        ({"block_size": 64, "requests": [call(t=5.0), call(t=1.0)]}, r"requests\[1\]: field 't'"),
        (
            {
                "requests": [
                    call(),
                    {"type": "subagent", "t": 3.0, "requests": [call(), call(think_time="x")]},
                ]
            },
            r"requests\[1\]\.requests\[1\]: field 'think_time'",
        ),
        ({"requests": [call(), {"type": "subagent", "t": 3.0}]}, r"requests\[1\]: field 'requests'"),
        ({"requests": "none"}, r"top level: field 'requests'"),
        ([1, 2], r"top level: field '\(file\)'"),
    ],
)
def test_malformed_files_name_the_record_and_field(tmp_path: Path, data: object, match: str) -> None:
    with pytest.raises(InputError, match=rf"bad\.json: {match}"):
        load_weka(write(tmp_path, data))


def test_broken_json(tmp_path: Path) -> None:
    path = tmp_path / "bad.json"
    path.write_text('{"requests": [\n{"t": 0,}\n]}')
    with pytest.raises(InputError, match=r"bad\.json: line 2: .*not valid JSON"):
        load_weka(path)
