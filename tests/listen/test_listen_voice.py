"""The voice pipeline outside the engine: fixed stages, and a recogniser whose delay varies by turn."""

from __future__ import annotations

import statistics

import pytest

from flatshare.listen.voice import VoicePipeline
from flatshare.runfiles.records import ReplayRecord


def turn(rid: str, send: float, first_sentence: float) -> ReplayRecord:
    times = [send + first_sentence / 2, send + first_sentence]
    return ReplayRecord(rid, "call", "voice", 0, 100, 2, "sim0", send, 2, times, times[-1], "length", "ok")


def test_a_constant_recogniser_adds_the_same_delay_to_every_turn() -> None:
    pipeline = VoicePipeline()
    assert (
        pipeline.asr_final_for("v1")
        == pipeline.asr_final_for("v2")
        == pipeline.asr_final_quantile(0.1)
        == 0.3
    )
    assert pipeline.turn_latency(turn("v1", 10.0, 0.4)) == pytest.approx(pipeline.fixed_s + 0.4)


def test_a_varying_recogniser_draws_each_turns_delay_from_its_id() -> None:
    """Lognormal about the 0.3 s median: the draws' median and 90th percentile match the quantiles
    (0.37 gives AssemblyAI's published p90/median of 1.6), the same id always draws the same delay, and the
    turn's latency carries its own delay."""
    pipeline = VoicePipeline(asr_final_spread=0.37)
    delays = [pipeline.asr_final_for(f"voice-{c}/t{k}") for c in range(40) for k in range(50)]
    assert statistics.median(delays) == pytest.approx(0.3, rel=0.03)
    p90 = statistics.quantiles(delays, n=10)[-1]
    assert p90 == pytest.approx(pipeline.asr_final_quantile(0.9), rel=0.05)
    assert pipeline.asr_final_quantile(0.9) / pipeline.asr_final_quantile(0.5) == pytest.approx(1.6, rel=0.01)
    assert pipeline.asr_final_for("voice-0/t0") == pipeline.asr_final_for("voice-0/t0")
    record = turn("voice-0/t3", 10.0, 0.4)
    expected = pipeline.end_of_speech_s + pipeline.asr_final_for(record.id) + pipeline.tts_first_audio_s + 0.4
    assert pipeline.turn_latency(record) == pytest.approx(expected)
    assert pipeline.asr_final_for(record.id) != 0.3


@pytest.mark.parametrize("spread", [-0.1, 2.5, float("nan")])
def test_a_spread_outside_zero_to_two_is_refused(spread: float) -> None:
    with pytest.raises(ValueError, match="asr_final_spread"):
        VoicePipeline(asr_final_spread=spread)
