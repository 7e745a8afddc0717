"""A call rendered from a real (tiny) co-location run folder, written by the experiment's own `run_one`."""

from __future__ import annotations

from pathlib import Path

import pytest
from listenkit import needs_speech, silences

from flatshare.colocation.experiment import MAIN_CONDITIONS, ColocationPlan, run_one
from flatshare.colocation.runs import load_runs
from flatshare.listen.render import render_call
from flatshare.listen.speech import read_wav
from flatshare.listen.timeline import load_voice_run, worst_turn
from flatshare.listen.voice import VoicePipeline

pytestmark = [pytest.mark.vllm, needs_speech]


def test_worst_turn_of_a_colocation_run_is_heard_as_long_as_it_was_measured(tmp_path: Path) -> None:
    alone = next(c for c in MAIN_CONDITIONS if c.key == "alone")
    plan = ColocationPlan(callers=(1,), agents=1, seeds=1, duration_s=30.0, drain_s=20.0, workers=1)
    folder = Path(run_one(tmp_path, alone, 1, 0, plan))
    (saved,) = load_runs(tmp_path)
    run = load_voice_run(folder)
    worst = worst_turn(run)
    assert run.label == "alone"
    assert worst.wait_s == max(VoicePipeline().turn_latency(r) for r in saved.records if r.cls == "voice")
    done = render_call(folder, worst.caller, worst.call, tmp_path / "call.wav", turns=[worst.turn])
    audio, rate = read_wav(done.wav)
    (gap,) = silences(audio[:, 0], rate, min_s=1.0)
    assert gap[1] == pytest.approx(worst.wait_s, abs=0.05)
    assert audio.shape[0] / rate == pytest.approx(done.timelines[0].length_s, abs=0.05)
