"""Speech of an exact length: espeak-ng says the words, sox fits them to the seconds, numpy trims and pads.

`speak(text, seconds, rate, voice)` returns exactly `round(seconds * rate)` float samples in [-1, 1] whose
first and last samples are speech (espeak-ng's own lead-in and tail silences are trimmed), so the silences
between clips are only the ones the mixer writes. espeak-ng speaks `ESPEAK_WPM` words a minute; sox's
`tempo` (pitch kept) then stretches or squeezes the words to the requested length, and the last few samples
are cut or padded (with a short fade) so the length is exact. Both tools are Debian packages (`make
system-deps` installs them; `missing_tools` says which are absent).
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import wave
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import numpy as np

from flatshare.errors import InputError

TOOLS = ("espeak-ng", "sox")
ESPEAK_WPM = 150  # espeak-ng's words a minute: ~2.5 words/s, the voice workload's speaking pace
WORDS_PER_S = ESPEAK_WPM / 60
SPEECH_FLOOR = 10 ** (-40 / 20)  # samples quieter than -40 dBFS at a clip's edges are trimmed as silence


@dataclass(frozen=True)
class Voice:
    """An espeak-ng voice name (language, `+variant`)."""

    name: str


CALLER_VOICE = Voice("en-us+m3")
AGENT_VOICE = Voice("en-us+f3")


def missing_tools() -> list[str]:
    """The speech tools not on PATH (empty when `speak` can run)."""
    return [tool for tool in TOOLS if shutil.which(tool) is None]


def require_tools() -> None:
    """InputError naming the missing tools and how to install them."""
    missing = missing_tools()
    if missing:
        raise InputError(
            f"{' and '.join(missing)} not installed: run `make system-deps` "
            "(or `apt-get install espeak-ng sox`) to hear a call"
        )


def words_for(seconds: float, script: str, start: int = 0) -> str:
    """About `seconds` of speech at `WORDS_PER_S`: words of `script` from word `start`, wrapping round."""
    words = script.split()
    n = max(1, round(seconds * WORDS_PER_S))
    return " ".join(words[(start + i) % len(words)] for i in range(n))


def speak(text: str, seconds: float, rate: int, voice: Voice) -> np.ndarray:
    """`text` spoken in exactly `round(seconds * rate)` samples (float32)."""
    n = round(seconds * rate)
    if n <= 0:
        return np.zeros(0, dtype=np.float32)
    with tempfile.TemporaryDirectory(prefix="flatshare-listen-") as tmp:
        said, trimmed, fitted = Path(tmp) / "said.wav", Path(tmp) / "trimmed.wav", Path(tmp) / "fitted.wav"
        _run(["espeak-ng", "-v", voice.name, "-s", str(ESPEAK_WPM), "-w", str(said), text])
        raw, raw_rate = read_wav(said)
        words = _trim(raw[:, 0])
        if words.size == 0:
            raise InputError(f"espeak-ng said nothing for {text!r}")
        write_wav(trimmed, words[:, None], raw_rate)
        tempo = (words.size / raw_rate) / (n / rate)
        fit = ["-r", str(rate), "-b", "16", str(fitted), "tempo", "-s", f"{tempo:.6f}"]
        _run(["sox", "-D", str(trimmed), *fit])
        out, _ = read_wav(fitted)
    return _exact(_trim(out[:, 0]), n)


def _run(command: list[str]) -> None:
    try:
        subprocess.run(command, check=True, capture_output=True, timeout=60)
    except FileNotFoundError as exc:
        raise InputError(f"{command[0]} not installed: run `make system-deps`") from exc
    except subprocess.CalledProcessError as exc:
        message = exc.stderr.decode(errors="replace").strip().splitlines()
        raise InputError(f"{command[0]} failed: {message[-1] if message else exc.returncode}") from exc


def _trim(samples: np.ndarray) -> np.ndarray:
    loud = np.flatnonzero(np.abs(samples) >= SPEECH_FLOOR)
    return samples[loud[0] : loud[-1] + 1] if loud.size else samples[:0]


def _exact(samples: np.ndarray, n: int) -> np.ndarray:
    """Resample to exactly `n` samples (linear interpolation; after sox's tempo the change is a few ms, so the
    pitch moves by well under 1%). Both edges stay speech."""
    if samples.size == n:
        return samples.astype(np.float32)
    where = np.linspace(0.0, samples.size - 1, n)
    return np.interp(where, np.arange(samples.size), samples).astype(np.float32)


def read_wav(path: Path) -> tuple[np.ndarray, int]:
    """An 8- or 16-bit PCM wav as float32 samples in [-1, 1], shape (frames, channels), and its rate."""
    with wave.open(str(path), "rb") as f:
        width, count, rate = f.getsampwidth(), f.getnchannels(), f.getframerate()
        raw = f.readframes(f.getnframes())
    if width == 2:
        data = np.frombuffer(raw, dtype="<i2").astype(np.float32) / 32768.0
    elif width == 1:
        data = (np.frombuffer(raw, dtype=np.uint8).astype(np.float32) - 128.0) / 128.0
    else:
        raise InputError(f"{path}: {8 * width}-bit samples; 8- or 16-bit PCM expected")
    return data.reshape(-1, count), rate


def write_wav(path: Path | IO[bytes], samples: np.ndarray, rate: int, bits: int = 16) -> None:
    """Write float samples, shape (frames, channels), as 16-bit (or 8-bit, half the size) PCM, to a path or
    a binary file object."""
    if bits == 16:
        pcm = np.clip(np.round(samples * 32767.0), -32768, 32767).astype("<i2").tobytes()
    elif bits == 8:
        pcm = np.clip(np.round(samples * 127.0) + 128, 0, 255).astype(np.uint8).tobytes()
    else:
        raise ValueError(f"bits must be 8 or 16, got {bits}")
    with wave.open(path if not isinstance(path, Path) else str(path), "wb") as f:
        f.setnchannels(samples.shape[1])
        f.setsampwidth(bits // 8)
        f.setframerate(rate)
        f.writeframes(pcm)
