from __future__ import annotations

from typing import Any

import pytest

from flatshare.workloads.model import Session, Workload, WorkloadRequest, clip_to_model_len, merge
from flatshare.workloads.tokens import unique_span


def req(rid: str = "r0", sid: str = "s0", **kw: Any) -> WorkloadRequest:
    fields: dict[str, Any] = {
        "id": rid,
        "session_id": sid,
        "cls": "agent",
        "priority": 10,
        "prompt": (unique_span(rid, 8),),
        "max_tokens": 4,
    }
    fields.update(kw)
    return WorkloadRequest(**fields)


@pytest.mark.parametrize(
    ("change", "match"),
    [
        ({"max_tokens": 0}, "max_tokens"),
        ({"pause_before_s": -1.0}, "pause_before_s"),
        ({"pause_before_s": float("nan")}, "pause_before_s"),
        ({"priority": True}, "priority"),
        ({"priority": 1.5}, "priority"),
        ({"prompt": ()}, "at least one token"),
        ({"cls": "Voice!"}, "class"),
        ({"first_sentence_tokens": 5}, "first_sentence_tokens exceeds"),
        ({"vocab_size": 3}, "vocab"),
    ],
)
def test_request_rejects_bad_fields(change: dict[str, Any], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        req(**change)


def test_request_ids_are_built_from_spans() -> None:
    r = req(prompt=(unique_span("a", 5), unique_span("b", 3)))
    assert r.prompt_tokens == 8
    assert len(r.prompt_token_ids) == 8
    assert r.prompt_token_ids == req(prompt=(unique_span("a", 5), unique_span("b", 3))).prompt_token_ids


def test_session_checks_membership_and_start() -> None:
    with pytest.raises(ValueError, match="names session"):
        Session("s0", "agent", 0.0, (req(sid="other"),))
    with pytest.raises(ValueError, match="must equal start_s"):
        Session("s0", "agent", 2.0, (req(pause_before_s=1.0),))
    with pytest.raises(ValueError, match="no requests"):
        Session("s0", "agent", 0.0, ())


def test_issue_time_waits_for_reply_plus_pause() -> None:
    s = Session("s0", "agent", 1.0, (req("a", pause_before_s=1.0), req("b", pause_before_s=3.0)))
    assert s.issue_s(0) == 1.0
    assert s.issue_s(1, prev_done_s=10.0, prev_output_tokens=100) == 13.0


def test_voice_issue_time_waits_until_the_reply_is_spoken() -> None:
    turns = (req("a", "v", cls="voice"), req("b", "v", cls="voice", pause_before_s=2.0))
    s = Session("v", "voice", 0.0, turns, 4.0)
    # 20 tokens spoken at 4 tokens/s from the first sentence at 5 s: speech ends at 10 s, caller talks 2 s.
    assert s.issue_s(1, prev_done_s=6.0, prev_output_tokens=20, prev_first_sentence_s=5.0) == 12.0
    # A reply still decoding when speech would have ended holds the caller back.
    assert s.issue_s(1, prev_done_s=30.0, prev_output_tokens=20, prev_first_sentence_s=5.0) == 32.0


def test_workload_rejects_duplicate_ids() -> None:
    a = Session("s0", "agent", 0.0, (req("r", "s0"),))
    b = Session("s1", "agent", 0.0, (req("r", "s1"),))
    with pytest.raises(ValueError, match="duplicate request id 'r'"):
        Workload("w", (a, b))
    with pytest.raises(ValueError, match="duplicate session id"):
        merge("w", [Workload("x", (a,)), Workload("y", (a,))])


def test_to_open_loop_orders_by_arrival() -> None:
    s = Session("s0", "agent", 0.0, (req("a", arrival_s=5.0), req("b", arrival_s=1.0, pause_before_s=2.0)))
    open_loop = Workload("w", (s,)).to_open_loop()
    assert [x.id for x in open_loop.sessions] == ["b", "a"]
    assert [x.start_s for x in open_loop.sessions] == [1.0, 5.0]
    assert open_loop.n_requests == 2
    with pytest.raises(ValueError, match="lack arrival_s"):
        Workload("w", (Session("s0", "agent", 0.0, (req("a"),)),)).to_open_loop()


def test_clip_keeps_output_then_the_prompt_head() -> None:
    assert clip_to_model_len(1000, 100, None) == (1000, 100)
    assert clip_to_model_len(1000, 100, 4096) == (1000, 100)
    assert clip_to_model_len(5000, 100, 4096) == (3996, 100)
    assert clip_to_model_len(5000, 9000, 4096) == (1, 4095)
