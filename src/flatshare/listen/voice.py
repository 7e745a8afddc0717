"""Voice turn latency: what a caller hears, from the end of their speech to the first audio.

turn latency = `end_of_speech_s` (the voice-activity detector's silence timeout) + `asr_final_s`
(the recogniser's final transcript) + the engine's time from sending the turn to the end of the
reply's first sentence + `tts_first_audio_s` (the synthesiser's first audio from that sentence).
The defaults (0.6 + 0.3 + 0.35 = 1.25 s of fixed pipeline) are typical of streaming voice stacks and
chosen so that the voice agent alone lands near the first seed's 1.8 s p95. A failed or refused turn
counts as `failed_turn_s` (30 s), never dropped: a refused turn is silence on the line.

A real recogniser's final transcript does not come a fixed time after the end of speech: AssemblyAI's
streaming model is published at ~150 ms median and ~240 ms at the 90th percentile after the endpoint, a
ratio of 1.6. With `asr_final_spread` > 0 each turn's delay is lognormal around `asr_final_s` (its
median) with that sigma (0.37 gives the published 90th-to-median ratio), drawn from the turn's id, so the
driver that sends the turn (`flatshare.replay.virtual`) and the analysis that scores it agree without
storing it. 0 (the default, and every committed result before it): the constant `asr_final_s`. The seed
table's engine-time rows subtract `fixed_s`, the median pipeline.
"""

from __future__ import annotations

import hashlib
import itertools
import math
from dataclasses import dataclass
from statistics import NormalDist

from flatshare.runfiles.records import ReplayRecord, first_sentence_times


@dataclass(frozen=True)
class VoicePipeline:
    end_of_speech_s: float = 0.6
    asr_final_s: float = 0.3
    tts_first_audio_s: float = 0.35
    failed_turn_s: float = 30.0
    asr_final_spread: float = 0.0

    def __post_init__(self) -> None:
        if not 0 <= self.asr_final_spread <= 2 or not self.asr_final_s >= 0:
            raise ValueError("voice pipeline: asr_final_spread must be in [0, 2] and asr_final_s >= 0")

    def asr_final_for(self, turn_id: str) -> float:
        """This turn's final-transcript delay: `asr_final_s`, or with `asr_final_spread` a lognormal draw
        around it fixed by the turn's id."""
        if self.asr_final_spread == 0:
            return self.asr_final_s
        digest = int.from_bytes(hashlib.blake2b(turn_id.encode(), digest_size=8).digest(), "big")
        return self.asr_final_quantile((digest + 0.5) / 2**64)

    def asr_final_quantile(self, q: float) -> float:
        """The delay's `q` quantile (what a voice agent learns of its recogniser from its own turns)."""
        if self.asr_final_spread == 0:
            return self.asr_final_s
        return self.asr_final_s * math.exp(self.asr_final_spread * NormalDist().inv_cdf(q))

    @property
    def fixed_s(self) -> float:
        return self.end_of_speech_s + self.asr_final_s + self.tts_first_audio_s

    def turn_latency(self, record: ReplayRecord) -> float:
        """Seconds of silence the caller hears for this turn."""
        first_sentence = record.first_sentence_s
        if record.status != "ok" or first_sentence is None:
            return self.failed_turn_s
        fixed = self.end_of_speech_s + self.asr_final_for(record.id) + self.tts_first_audio_s
        return min(fixed + first_sentence - record.send_s, self.failed_turn_s)


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
