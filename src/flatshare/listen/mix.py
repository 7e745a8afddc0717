"""A lane of audio from a call's timeline: speech where someone talks, zeros where the line is silent.

Every stretch's first and last sample are placed by sample arithmetic on the timeline's own times
(`round(t * rate)`), so each silence is the timeline's to within one sample and the lane is exactly
`round(length_s * rate)` samples long. Lanes of two runs go to the two stereo channels (`channels`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from flatshare.listen.speech import AGENT_VOICE, CALLER_VOICE, Voice, speak, words_for
from flatshare.listen.timeline import CallTimeline

# Fixed words (the workload's prompts are token ids, not text): a caller changing a train booking.
CALLER_SCRIPT = (
    "hi there I would like to change my train booking from Thursday to Friday morning please it is "
    "under the name Morgan and the reference should be on the email you sent me last week can I keep "
    "the same seat and is there anything extra to pay for the change"
)
AGENT_SCRIPT = (
    "of course I can help you with that let me pull up your booking now I can see your ticket for "
    "Thursday there is a train on Friday at nine fifteen with the same seat available the change is "
    "free on this fare and I will send the new ticket to your email right away"
)
Speaker = Callable[[str, float, int, Voice], np.ndarray]


def lane(timeline: CallTimeline, rate: int, speaker: Speaker = speak) -> np.ndarray:
    """The timeline as mono float32 samples: caller and reply stretches spoken, the rest zeros."""
    out = np.zeros(round(timeline.length_s * rate), dtype=np.float32)
    for segment in timeline.segments():
        first, end = round(segment.start_s * rate), round(segment.end_s * rate)
        if segment.kind not in ("caller", "reply") or end <= first:
            continue
        voice, script = (
            (CALLER_VOICE, CALLER_SCRIPT) if segment.kind == "caller" else (AGENT_VOICE, AGENT_SCRIPT)
        )
        seconds = (end - first) / rate
        text = words_for(seconds, script, start=7 * (segment.turn - 1))
        out[first:end] = speaker(text, seconds, rate, voice)[: end - first]
    return out


def channels(lanes: Sequence[np.ndarray]) -> np.ndarray:
    """Lanes side by side, shape (frames, len(lanes)); shorter lanes end in silence."""
    frames = max(x.size for x in lanes)
    out = np.zeros((frames, len(lanes)), dtype=np.float32)
    for i, x in enumerate(lanes):
        out[: x.size, i] = x
    return out


def cached(speaker: Speaker) -> Speaker:
    """`speaker` remembering its clips (a compared call's caller says the same words in both lanes)."""
    memo: dict[tuple[str, float, int, Voice], np.ndarray] = {}

    def say(text: str, seconds: float, rate: int, voice: Voice) -> np.ndarray:
        key = (text, seconds, rate, voice)
        if key not in memo:
            memo[key] = speaker(text, seconds, rate, voice)
        return memo[key]

    return say
