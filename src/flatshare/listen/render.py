"""Render one call of a saved run (and the same call of a second run) as `call.wav` and `call.png`.

Left channel: the first run; right channel: `compare`, the same call of another condition on the same
workload (same spec and seed), so stock vLLM and make-room can be heard side by side. Both lanes start with
the caller's first chosen turn; each turn is the caller speaking, the run's measured wait in silence, the
reply spoken (`flatshare.listen.timeline`). The png beside the wav shows the lanes on one time axis.

Everything is read and checked before the speech tools are asked for or a file is written: the run folders
(bounded and typed, `load_voice_run`), the chosen turns, and the clip's length (at most `MAX_CLIP_S`). Both
files are written by `flatshare.safeout` (never through a symlink planted as the wav or the png).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from flatshare import safeout
from flatshare.errors import InputError
from flatshare.listen.figure import call_figure
from flatshare.listen.mix import Speaker, cached, channels, lane
from flatshare.listen.speech import require_tools, speak, write_wav
from flatshare.listen.timeline import (
    CallTimeline,
    TurnRef,
    VoiceRun,
    call_timeline,
    issued_turns,
    load_voice_run,
)

DEFAULT_RATE = 16_000
PHONE_RATE = 8_000  # a telephone line's sample rate, for small files to link from a report
MAX_CLIP_S = 3600.0  # one hour of audio: 110 MiB of 16 kHz 16-bit stereo


@dataclass(frozen=True)
class Rendered:
    wav: Path
    png: Path
    timelines: tuple[CallTimeline, ...]
    rate: int


def render_call(
    run_dir: Path,
    caller: int,
    call: int,
    out: Path,
    *,
    turns: Sequence[int] | None = None,
    compare: Path | None = None,
    rate: int = DEFAULT_RATE,
    bits: int = 16,
    speaker: Speaker = speak,
) -> Rendered:
    """Write `out` (a .wav) and the figure beside it (.png); turns default to every turn both runs sent."""
    if out.suffix.lower() != ".wav":
        raise InputError(f"--out {out}: must end in .wav (call.png is written beside it)")
    if not 4000 <= rate <= 48000:
        raise InputError(f"--rate {rate}: must be 4000-48000 samples a second")
    runs = [load_voice_run(run_dir)]
    if compare is not None:
        runs.append(_same_workload(runs[0], load_voice_run(compare)))
    chosen = list(turns) if turns else _common_turns(runs, caller, call)
    timelines = tuple(call_timeline(run, caller, call, chosen) for run in runs)
    longest = max(t.length_s for t in timelines)
    if longest > MAX_CLIP_S:
        raise InputError(
            f"call {call} of caller line {caller}: the clip would last {longest:.0f} s, more than "
            f"{MAX_CLIP_S:.0f} s (choose fewer turns with --turns)"
        )
    if speaker is speak:
        require_tools()
    say = cached(speaker)
    audio = channels([lane(t, rate, say) for t in timelines])
    safeout.write_file(out, lambda f: write_wav(f, audio, rate, bits), binary=True)
    png = out.with_suffix(".png")
    call_figure(timelines, png, _title(timelines, chosen))
    return Rendered(out, png, timelines, rate)


def render_pair(
    stock_run_dir: Path,
    make_room_run_dir: Path,
    turn: TurnRef,
    out_dir: Path,
    name: str = "worst-turn",
    rate: int = PHONE_RATE,
    bits: int = 8,
) -> tuple[Path, Path]:
    """One turn of stock vLLM (left) and make-room (right) as `out_dir/<name>.wav` and `.png`, small enough
    to link from a report (8 kHz, 8-bit by default). `turn`: e.g. `worst_turn(load_voice_run(stock))`."""
    done = render_call(
        stock_run_dir,
        turn.caller,
        turn.call,
        out_dir / f"{name}.wav",
        turns=[turn.turn],
        compare=make_room_run_dir,
        rate=rate,
        bits=bits,
    )
    return done.wav, done.png


def _same_workload(first: VoiceRun, other: VoiceRun) -> VoiceRun:
    if (first.spec, first.seed) != (other.spec, other.seed):
        raise InputError(
            f"--compare {other.folder}: another workload ({other.spec!r} seed {other.seed}; "
            f"{first.folder} has {first.spec!r} seed {first.seed})"
        )
    return other


def _common_turns(runs: Sequence[VoiceRun], caller: int, call: int) -> list[int]:
    sent = [set(issued_turns(run, caller, call)) for run in runs]
    common = sorted(set.intersection(*sent))
    if not common:
        raise InputError(f"call {call} of caller line {caller}: no turn was sent in every run")
    return common


def _title(timelines: Sequence[CallTimeline], turns: Sequence[int]) -> str:
    first = timelines[0]
    lanes = " / ".join(
        f"{t.label} ({side})" for t, side in zip(timelines, ("left channel", "right channel"), strict=False)
    )
    shown = ", ".join(str(n) for n in turns)
    return (
        f"caller line {first.caller}, call {first.call}, turn{'s' if len(turns) > 1 else ''} {shown}: {lanes}"
    )
