"""What a caller hears, in seconds, from a saved run: turns found by call, waits as the run measured them."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
from listenkit import SPEC, saved_run

from flatshare.errors import InputError
from flatshare.listen.timeline import call_requests, call_timeline, load_voice_run, worst_turn
from flatshare.listen.voice import VoicePipeline
from flatshare.workloads.spec import parse_spec


def test_turns_are_numbered_by_call_in_the_order_the_caller_speaks(tmp_path: Path) -> None:
    run = load_voice_run(saved_run(tmp_path / "run", {}))
    requests = parse_spec(SPEC, seed=0).sessions[0].requests
    assert len(requests) > 4  # the caller line holds more than one call of 4 turns
    first, second = call_requests(run, 0, 1), call_requests(run, 0, 2)
    assert sorted(first) == [1, 2, 3, 4]
    assert [first[t][0].id for t in (1, 2, 3, 4)] == [r.id for r in requests[:4]]
    assert second[1][0].id == requests[4].id


def test_each_turn_is_speech_then_the_runs_wait_then_the_reply_at_the_speech_rate(tmp_path: Path) -> None:
    run = load_voice_run(saved_run(tmp_path / "run", {1: 8.3}))
    timeline = call_timeline(run, 0, 1)
    session = run.sessions["voice/0"]
    pipeline = VoicePipeline()
    assert [t.turn for t in timeline.turns] == [1, 2, 3, 4]
    for turn, request in zip(timeline.turns, session.requests, strict=False):
        record = run.records[request.id]
        assert turn.wait_s == pytest.approx(pipeline.turn_latency(record))
        assert turn.reply_s == pytest.approx(request.max_tokens / 3.25)
        assert turn.hold_s == 0.0
        if turn.turn > 1:
            assert turn.caller_s == pytest.approx(request.pause_before_s)
    second = timeline.turns[1]
    assert second.wait_s == pytest.approx(
        1.25 + 8.3 + 0.03 * (session.requests[1].first_sentence_tokens or 1) - 0.03
    )
    segments = timeline.segments()
    assert segments[0].start_s == 0.0 and segments[-1].end_s == pytest.approx(timeline.length_s)
    assert all(a.end_s == b.start_s for a, b in itertools.pairwise(segments))


def test_a_failed_turn_is_the_runs_failed_wait_and_no_reply(tmp_path: Path) -> None:
    run = load_voice_run(saved_run(tmp_path / "run", {}, failed=frozenset({2})))
    turn = call_timeline(run, 0, 1, [3]).turns[0]
    assert (turn.status, turn.wait_s, turn.reply_s, turn.reply_tokens) == ("failed", 30.0, 0.0, 0)


def test_a_reply_decoded_slower_than_it_is_spoken_holds_the_caller(tmp_path: Path) -> None:
    run = load_voice_run(saved_run(tmp_path / "run", {}, token_gap_s=2.0))
    request = run.sessions["voice/0"].requests[0]
    record = run.records[request.id]
    turn = call_timeline(run, 0, 1, [1]).turns[0]
    assert record.end_s is not None and record.first_sentence_s is not None
    assert turn.hold_s == pytest.approx(record.end_s - record.first_sentence_s - request.max_tokens / 3.25)
    assert turn.hold_s > 0


def test_worst_turn_is_the_longest_wait(tmp_path: Path) -> None:
    run = load_voice_run(saved_run(tmp_path / "run", {5: 6.0, 1: 4.0}))
    worst = worst_turn(run)
    assert (worst.caller, worst.call, worst.turn) == (0, 2, 2)
    assert worst.wait_s > 7.0


def test_unknown_calls_turns_and_folders_are_input_errors(tmp_path: Path) -> None:
    run = load_voice_run(saved_run(tmp_path / "run", {}))
    with pytest.raises(InputError, match="has no call 99"):
        call_timeline(run, 0, 99)
    with pytest.raises(InputError, match="turns 1-4, not 7"):
        call_timeline(run, 0, 1, [7])
    with pytest.raises(InputError, match="no caller line 3"):
        call_timeline(run, 3, 1)
    with pytest.raises(InputError, match="not a run folder"):
        load_voice_run(tmp_path)
