"""The first sentence of a reply, defined once (`flatshare.runfiles.records.first_sentence_times`) and read
alike by a record, the virtual-time driver and the listening pages."""

from __future__ import annotations

from flatshare.listen.voice import turn_stages
from flatshare.runfiles.records import ReplayRecord, first_sentence_times

TIMES = [1.0, 1.5, 2.25, 3.0]


def test_the_first_sentence_is_its_first_tokens_or_every_token_of_a_shorter_reply() -> None:
    assert list(first_sentence_times(TIMES, 2)) == [1.0, 1.5]
    assert list(first_sentence_times(TIMES, 9)) == TIMES
    assert list(first_sentence_times(TIMES, None)) == [] and list(first_sentence_times([], 3)) == []


def _record(first_sentence_tokens: int | None) -> ReplayRecord:
    return ReplayRecord(
        "voice/0/1",
        session_id="voice/0",
        cls="voice",
        priority=0,
        prompt_tokens=10,
        max_tokens=4,
        first_sentence_tokens=first_sentence_tokens,
        engine="sim0",
        send_s=0.5,
        token_times_s=TIMES,
        first_scheduled_s=0.75,
    )


def test_a_record_and_a_turns_stages_read_the_same_first_sentence() -> None:
    record = _record(3)
    assert record.first_sentence_s == 2.25
    stages = turn_stages(record)
    assert stages is not None and stages.first_sentence_s == 2.25 - 1.0 and stages.gaps_s == (0.5, 0.75)
    assert _record(9).first_sentence_s == 3.0 and _record(None).first_sentence_s is None
