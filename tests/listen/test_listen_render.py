"""Acceptance (issue 18): a call rendered from a small saved run, measured on the wav: each silence before a
reply is the run's recorded wait (within 50 ms), and the clip is as long as the call's timeline."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from listenkit import needs_speech, saved_run, silences
from typer.testing import CliRunner

from flatshare.cli import app
from flatshare.errors import InputError
from flatshare.listen.render import render_call, render_pair
from flatshare.listen.speech import AGENT_VOICE, SPEECH_FLOOR, read_wav, speak
from flatshare.listen.timeline import TurnRef
from flatshare.listen.voice import VoicePipeline
from flatshare.runfiles.records import read_records
from flatshare.workloads.spec import parse_spec
from flatshare.workloads.synth.voice import VoiceProfile

pytestmark = needs_speech
TOLERANCE_S = 0.05
RATE = 16_000


def _heard(folder: Path, turns: list[int]) -> list[tuple[float, float, float]]:
    """(caller speech, wait, reply) of call 1's `turns`, worked out here from the workload and the records."""
    run = {r.id: r for r in read_records(folder / "requests.jsonl")}
    session = parse_spec("voice:callers=1,duration=80,turns=4", seed=0).sessions[0]
    out = []
    for turn in turns:
        request = session.requests[turn - 1]
        record = run[request.id]
        said = request.prompt[-1].length / VoiceProfile.caller_tokens_per_s
        speech = said if turn == 1 else request.pause_before_s
        out.append((speech, VoicePipeline().turn_latency(record), len(record.token_times_s) / 3.25))
    return out


def _check_channel(samples: np.ndarray, heard: list[tuple[float, float, float]]) -> None:
    gaps = silences(samples, RATE, min_s=1.0)
    assert len(gaps) == len(heard), gaps
    start = 0.0
    for (gap_start, gap), (speech, wait, reply) in zip(gaps, heard, strict=True):
        assert gap == pytest.approx(wait, abs=TOLERANCE_S)
        assert gap_start == pytest.approx(start + speech, abs=TOLERANCE_S)
        start += speech + wait + reply
    assert samples.size / RATE == pytest.approx(start, abs=1 / RATE)


def test_each_silence_is_the_runs_wait_and_the_clip_the_calls_length(tmp_path: Path) -> None:
    stock = saved_run(tmp_path / "stock", {1: 8.3, 3: 2.0})
    done = render_call(stock, 0, 1, tmp_path / "call.wav")
    audio, rate = read_wav(done.wav)
    assert (rate, audio.shape[1]) == (RATE, 1)
    heard = _heard(stock, [1, 2, 3, 4])
    assert heard[1][1] > 9.5  # the stock-like turn: 1.25 s of pipeline + 8.3 s to the first token + decoding
    _check_channel(audio[:, 0], heard)
    assert done.png.stat().st_size > 10_000


def test_compare_puts_the_other_condition_in_the_right_channel(tmp_path: Path) -> None:
    stock = saved_run(tmp_path / "stock", {1: 8.3})
    room = saved_run(tmp_path / "room", {1: 0.25})
    done = render_call(stock, 0, 1, tmp_path / "pair.wav", turns=[1, 2], compare=room)
    audio, _ = read_wav(done.wav)
    assert audio.shape[1] == 2
    stock_heard, room_heard = _heard(stock, [1, 2]), _heard(room, [1, 2])
    _check_channel(audio[:, 0], stock_heard)
    right = audio[:, 1]
    end = round(sum(sum(t) for t in room_heard) * RATE)
    _check_channel(right[:end], room_heard)
    assert not np.abs(right[end:]).any()  # the shorter lane ends in silence
    speech = round(room_heard[0][0] * RATE)
    assert np.array_equal(audio[:speech, 0], right[:speech])  # the caller says the same in both


def test_render_pair_writes_a_small_wav_and_png_of_one_turn(tmp_path: Path) -> None:
    stock = saved_run(tmp_path / "stock", {1: 8.3})
    room = saved_run(tmp_path / "room", {1: 0.25})
    wav, png = render_pair(stock, room, TurnRef(0, 1, 2, 0.0), tmp_path / "out")
    audio, rate = read_wav(wav)
    assert (rate, audio.shape[1]) == (8_000, 2)
    assert wav.stat().st_size < 8_000 * 2 * 20 and png.stat().st_size > 0  # 8-bit samples
    gaps = silences(audio[:, 0], rate, min_s=1.0)
    assert len(gaps) == 1 and gaps[0][1] == pytest.approx(_heard(stock, [2])[0][1], abs=TOLERANCE_S)


def test_compare_needs_the_same_workload(tmp_path: Path) -> None:
    stock = saved_run(tmp_path / "stock", {})
    other = saved_run(tmp_path / "other", {}, seed=1)
    with pytest.raises(InputError, match="another workload"):
        render_call(stock, 0, 1, tmp_path / "x.wav", compare=other)


@pytest.mark.parametrize("seconds", [0.3, 1.7, 6.0])
def test_speech_has_the_exact_length_and_starts_and_ends_in_speech(seconds: float) -> None:
    clip = speak("of course I can help you with that", seconds, RATE, AGENT_VOICE)
    assert clip.size == round(seconds * RATE)
    assert abs(clip[0]) >= SPEECH_FLOOR * 0.9 and abs(clip[-1]) >= SPEECH_FLOOR * 0.9


def test_cli_renders_the_chosen_turns(tmp_path: Path) -> None:
    stock = saved_run(tmp_path / "stock", {1: 8.3})
    result = CliRunner().invoke(
        app, ["listen", str(stock), "--turns", "2,4", "--out", str(tmp_path / "c.wav")]
    )
    assert result.exit_code == 0, result.output
    assert "turn 2 9." in result.output
    audio, _ = read_wav(tmp_path / "c.wav")
    heard = _heard(stock, [2, 4])
    _check_channel(audio[:, 0], heard)
    assert (tmp_path / "c.png").stat().st_size > 0


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--turns", "2,9"], "turns 1-4, not 9"),
        (["--turns", "two"], "--turns 'two'"),
        (["--call", "0"], "--call counts from 1"),
        (["--bits", "12"], "--bits 12"),
        (["--compare", "OTHER"], "another workload"),
        (["--out", "call.mp3"], "must end in .wav"),
        (["RUN=missing"], "not a run folder"),
    ],
)
def test_cli_errors_are_one_line_and_exit_2(tmp_path: Path, args: list[str], message: str) -> None:
    stock = saved_run(tmp_path / "stock", {})
    other = saved_run(tmp_path / "other", {}, seed=1)
    run = str(tmp_path / "missing") if "RUN=missing" in args else str(stock)
    args = [a.replace("OTHER", str(other)) for a in args if a != "RUN=missing"]
    if "--out" not in args:
        args += ["--out", str(tmp_path / "c.wav")]
    result = CliRunner().invoke(app, ["listen", run, *args])
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert result.output.strip().count("\n") == 0
