"""Voice turn latency: what a caller hears, from the end of their speech to the first audio.

turn latency = `end_of_speech_s` (the voice-activity detector's silence timeout) + `asr_final_s`
(the recogniser's final transcript) + the engine's time from sending the turn to the end of the
reply's first sentence + `tts_first_audio_s` (the synthesiser's first audio from that sentence).
The defaults (0.6 + 0.3 + 0.35 = 1.25 s of fixed pipeline) are typical of streaming voice stacks and
chosen so that the voice agent alone lands near the first seed's 1.8 s p95. A failed or refused turn
counts as `failed_turn_s` (30 s), never dropped: a refused turn is silence on the line.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from flatshare.runfiles.records import ReplayRecord, first_sentence_times


@dataclass(frozen=True)
class VoicePipeline:
    end_of_speech_s: float = 0.6
    asr_final_s: float = 0.3
    tts_first_audio_s: float = 0.35
    failed_turn_s: float = 30.0

    @property
    def fixed_s(self) -> float:
        return self.end_of_speech_s + self.asr_final_s + self.tts_first_audio_s

    def turn_latency(self, record: ReplayRecord) -> float:
        """Seconds of silence the caller hears for this turn."""
        first_sentence = record.first_sentence_s
        if record.status != "ok" or first_sentence is None:
            return self.failed_turn_s
        return min(self.fixed_s + first_sentence - record.send_s, self.failed_turn_s)


@dataclass(frozen=True)
class TurnStages:
    """Where an engine's part of a turn went (simulator records carry `first_scheduled_s`)."""

    waiting_s: float
    prefill_s: float
    first_sentence_s: float
    gaps_s: tuple[float, ...]


def turn_stages(record: ReplayRecord) -> TurnStages | None:
    times, scheduled, sentence = record.token_times_s, record.first_scheduled_s, record.first_sentence_s
    if record.status != "ok" or not times or scheduled is None or sentence is None:
        return None
    gaps = tuple(
        b - a for a, b in itertools.pairwise(first_sentence_times(times, record.first_sentence_tokens))
    )
    return TurnStages(scheduled - record.send_s, times[0] - scheduled, sentence - times[0], gaps)
