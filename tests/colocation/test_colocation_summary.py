"""The co-location summary from hand-made saved runs: target, failed turns, throughput ratios."""

from __future__ import annotations

import dataclasses

import pytest

from flatshare.colocation.runs import SavedRun
from flatshare.colocation.summary import summarize
from flatshare.listen.voice import VoicePipeline
from flatshare.runfiles.records import ReplayRecord


def voice(i: int, send: float, first_sentence_after: float | None, status: str = "ok") -> ReplayRecord:
    times = [] if first_sentence_after is None else [send + first_sentence_after * k / 3 for k in (1, 2, 3)]
    return ReplayRecord(
        f"v{i}",
        "call",
        "voice",
        0,
        100,
        3,
        "sim0",
        send,
        3,
        times,
        times[-1] if times else send,
        "length",
        status,
    )


def agent(i: int, tokens: int, duration: float) -> ReplayRecord:
    times = [duration * (k + 1) / (tokens + 1) for k in range(tokens)]
    return ReplayRecord(
        f"a{i}", "agent", "agent", 10, 1000, tokens, "sim0", 0.0, None, times, times[-1], "length"
    )


def run(condition: str, records: list[ReplayRecord], seed: int = 0) -> SavedRun:
    return SavedRun(
        condition, 2, seed, records, [], {"duration_s": 100.0, "preemptions": 1, "scheduler_counters": {}}
    )


def test_target_failed_turns_and_throughput() -> None:
    pipeline = VoicePipeline()
    alone = run("alone", [voice(i, 10.0 * i, 0.3) for i in range(10)])
    priority = run(
        "vllm-priority",
        [voice(i, 10.0 * i, 4.0) for i in range(9)] + [voice(9, 90, None, "failed"), agent(0, 1000, 100.0)],
    )
    best = run("make-room-t48", [voice(i, 10.0 * i, 0.35) for i in range(10)] + [agent(0, 980, 100.0)])
    agents = run("agents-alone", [agent(0, 1000, 100.0)])
    summary = summarize([alone, priority, best, agents], pipeline)
    assert summary.target_s == pytest.approx(pipeline.fixed_s + 0.3 + 0.25)
    p = summary.conditions["vllm-priority"]
    assert p.voice_failed_turns == 1
    assert (p.voice_turn_p99_s or 0) > 20  # the failed turn counts as 30 s, not dropped
    assert p.voice_over_target_frac == 1.0
    m = summary.conditions["make-room-t48"]
    assert m.voice_over_target_frac == 0.0
    assert m.agent_throughput_ratio == pytest.approx(0.98, abs=1e-3)
    assert m.agent_throughput_ratio_alone == pytest.approx(0.98, abs=1e-3)
    assert m.nth_token_median(1) == pytest.approx(0.35 / 3, abs=1e-3)
    assert summary.to_json()["conditions"]["make-room-t48"]["voice_over_target_frac"] == 0.0


def test_without_the_alone_condition_there_is_no_target() -> None:
    """A plan without `alone` (the real-engine quick preset) still summarizes: no target, no shares over it."""
    summary = summarize([run("vllm-priority", [voice(0, 0.0, 1.0), voice(1, 5.0, 2.0)])])
    m = summary.conditions["vllm-priority"]
    assert summary.target_s is None and m.n_voice_turns == 2 and m.voice_turn_p95_s is not None
    assert m.voice_over_target_frac is None and m.voice_over_target_turns == 0
    assert "voice_over_target_frac" not in m.voice_call_ci


def test_an_alone_condition_without_voice_turns_is_refused() -> None:
    with pytest.raises(ValueError, match="alone"):
        summarize([run("alone", [])])


def test_intervals_resample_whole_calls() -> None:
    pipeline = VoicePipeline()
    alone = run("alone", [voice(i, 10.0 * i, 0.3) for i in range(10)])

    def call(name: str, level: float) -> list[ReplayRecord]:
        return [dataclasses.replace(voice(i, 10.0 * i, level), session_id=name) for i in range(5)]

    # Two seeds whose calls are named alike: four calls in all, two slow ones (4 s) and two fast ones (1 s).
    runs = [run("vllm-priority", call("a", 4.0) + call("b", 1.0), seed=s) for s in (0, 1)]
    one_call = run("make-room-t48", call("a", 0.35))
    summary = summarize([alone, *runs, one_call], pipeline)
    ci = summary.conditions["vllm-priority"].voice_call_ci
    fixed = pipeline.fixed_s
    low, high = ci["voice_turn_p50_s"]
    assert fixed + 1.0 - 1e-6 <= low <= high <= fixed + 4.0 + 1e-6 and high - low > 1.0  # spans call levels
    assert 0.0 <= ci["voice_over_target_frac"][0] <= ci["voice_over_target_frac"][1] <= 1.0
    # Not stage_first_sentence_mean_s: hand-made records have no engine-side schedule time.
    assert set(ci) == {
        "voice_turn_p50_s",
        "voice_turn_p95_s",
        "voice_over_target_frac",
        "voice_over_10s_frac",
        "voice_ttft_mean_s",
    }
    assert summary.conditions["make-room-t48"].voice_call_ci == {}  # one call: no interval


def test_the_kv_ledger_is_a_mean_only_where_every_run_saved_one_and_an_empty_one_is_not_written() -> None:
    def with_kv(condition: str, seed: int, free: float | None) -> SavedRun:
        saved = run(condition, [voice(seed, 1.0, 0.3), agent(seed, 100, 100.0)], seed=seed)
        if free is not None:
            saved.engine["kv_ledger"] = {"cache_block_s": 100.0, "free_block_s": free}
        return saved

    runs = [with_kv("alone", 0, None)]
    runs += [with_kv("vllm-priority", 0, 10.0), with_kv("vllm-priority", 1, 20.0)]
    runs += [with_kv("make-room-t48", 0, 10.0), with_kv("make-room-t48", 1, None)]  # one saved before it
    summary = summarize(runs, VoicePipeline())
    assert summary.conditions["vllm-priority"].kv_ledger == {"cache_block_s": 100.0, "free_block_s": 15.0}
    assert summary.conditions["make-room-t48"].kv_ledger == {}
    table = summary.to_json()["conditions"]
    assert "kv_ledger" not in table["make-room-t48"] and table["vllm-priority"]["kv_ledger"]
    for m in summary.conditions.values():
        assert type(m).from_json(m.to_json()).kv_ledger == m.kv_ledger
