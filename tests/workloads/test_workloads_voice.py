from __future__ import annotations

from statistics import median

import numpy as np

from flatshare.workloads.synth import VoiceProfile, voice_calls
from flatshare.workloads.synth.voice import draw_replies


def test_reply_lengths_match_the_seed() -> None:
    w = voice_calls(40, 600, seed=0)
    replies = [r.max_tokens for r in w.requests()]
    firsts = [r.first_sentence_tokens or 0 for r in w.requests()]
    assert len(replies) > 1500
    assert 22 <= median(replies) <= 24
    assert 14 <= median(firsts) <= 16
    assert max(firsts) <= 39 and max(replies) <= 60
    assert all(1 <= f <= n for f, n in zip(firsts, replies, strict=True))
    assert 0.75 <= np.mean(np.array(replies) > 16) <= 0.83  # a 16-token window ends before ~79% of replies
    assert np.mean(np.array(replies) > 48) < 0.002  # T=48 covers almost every reply


def test_draw_replies_over_many_turns() -> None:
    first, reply = draw_replies(VoiceProfile(), np.random.default_rng(7), 100_000)
    assert np.median(reply) == 23 and np.median(first) == 15
    assert first.max() <= 39 and reply.max() <= 60 and (reply >= first).all()


def test_calls_share_the_system_prompt_and_grow_their_dialogue() -> None:
    w = voice_calls(3, 120, seed=1, profile=VoiceProfile(system_tokens=300, turns_per_call=4))
    heads = {s.requests[0].prompt_token_ids[:300] for s in w.sessions}
    assert len(heads) == 1
    turns = w.sessions[0].requests
    assert len(turns) > 4
    a, b = turns[0], turns[1]
    assert b.prompt_token_ids[: a.prompt_tokens] == a.prompt_token_ids
    assert b.prompt_tokens == a.prompt_tokens + a.max_tokens + b.prompt[-1].length
    assert turns[4].prompt_tokens < turns[3].prompt_tokens  # a new call starts a fresh dialogue
    assert all(r.priority == 0 and r.cls == "voice" for r in w.requests())


def test_sessions_speak_replies_and_pause_for_the_caller() -> None:
    w = voice_calls(2, 300, seed=2, stagger_s=4.0)
    for s in w.sessions:
        assert s.speech_tokens_per_s == VoiceProfile().speech_tokens_per_s
        assert s.start_s == s.requests[0].pause_before_s
        assert all(0.5 <= r.pause_before_s <= 23.0 for r in s.requests[1:])
        arrivals = [r.arrival_s or 0.0 for r in s.requests]
        assert arrivals == sorted(arrivals) and arrivals[-1] < 300


def test_seed_determines_the_calls() -> None:
    assert voice_calls(2, 120, seed=3) == voice_calls(2, 120, seed=3)
    assert voice_calls(2, 120, seed=3) != voice_calls(2, 120, seed=4)
