"""Holding only while at risk: the hold of a protected reply's decode only in the steps it needs.

make-room's window holds lower-priority prefill out of every step until a protected reply has its first T
tokens (or its first sentence). Most of those steps are the reply's decode, and a held decode step carries
a handful of tokens where it could carry a whole chunk of agent prefill: at 6 voice callers the held steps
are what costs the agents most of their throughput (docs/make-room.md, "Where the agents' share goes").
Yet a reply that is ahead of its deadline does not need every step held. With `hold_deadline_s` set,
make-room holds a decoding protected reply's step only when, at the pace it has measured, letting
lower-priority prefill into this step would make the reply's first sentence late:

    elapsed + free_step + tokens_left * held_step > deadline

where `elapsed` is the time since the request arrived, `free_step` and `held_step` are the measured
durations of recent steps that did not and did hold, and `tokens_left` the reply's tokens still to come
before its first sentence ends, from the first sentences make-room has seen close (`SentenceLengths`).
Until both step kinds have been measured, every step of the window is held, as without a deadline. The
protected request's wait and prefill (before its first token) are always held.

Pure state and functions; `mechanisms.py` feeds them vLLM's clock and make-room's decisions.
"""

from __future__ import annotations

from collections import deque

import numpy as np

PACE_ALPHA = 0.25
"""Weight of the newest step in the step-duration averages (a few steps' memory: the mix of agent
contexts in a step changes over seconds)."""
FREE_SAMPLES = 16
"""Steps that let lower priorities in, remembered for `free_s`: the costliest of them is what a released
step is taken to cost (a chunk's cost grows with the context it reads: about 60 to 150 ms at 6 voice
callers)."""
SENTENCE_SAMPLES = 64
"""First sentences remembered for the length estimate."""
MIN_SENTENCE_SAMPLES = 8
"""Below this many, a reply's first sentence is assumed to take the whole window."""
SENTENCE_QUANTILE = 90
"""The length estimate: this percentile of the remembered first sentences longer than what the reply has
already produced (a tenth of replies run longer, and are held again as their deadline nears)."""


class StepPace:
    """Durations of two kinds of step, from the times at which vLLM asks for steps: steps that held lower
    priorities (`held_s`, a moving average), and steps that did not hold and carried a prefill chunk
    (`free_s`, the costliest of the recent ones: what a step the hold lets go may cost). Other steps (decodes only,
    nothing held; empty ones) are not what either estimate is for and are not credited.

    The interval between two `schedule()` calls is the duration of the step in flight between them: the
    step scheduled at the first call under synchronous scheduling, the one scheduled a call earlier under
    asynchronous scheduling (`lag` 1), where vLLM schedules a step while the previous one runs."""

    HELD, FREE, OTHER = "held", "free", "other"

    def __init__(self, lag: int = 0, alpha: float = PACE_ALPHA) -> None:
        if lag not in (0, 1) or not 0 < alpha <= 1:
            raise ValueError("StepPace: lag must be 0 or 1 and alpha in (0, 1]")
        self.lag, self.alpha = lag, alpha
        self._last_s: float | None = None
        self._kinds: deque[str] = deque(maxlen=2)  # newest last
        self.held_s: float | None = None
        self._free: deque[float] = deque(maxlen=FREE_SAMPLES)

    @property
    def free_s(self) -> float | None:
        """The costliest of the last `FREE_SAMPLES` steps that did not hold and carried a chunk."""
        return max(self._free) if self._free else None

    def step(self, now: float) -> None:
        """A step is being scheduled at `now`: the interval since the last one is credited."""
        if self._last_s is not None and len(self._kinds) > self.lag:
            kind = self._kinds[-1 - self.lag]
            interval = now - self._last_s
            if interval > 0 and kind == self.HELD:
                self.held_s = _ewma(self.held_s, interval, self.alpha)
            elif interval > 0 and kind == self.FREE:
                self._free.append(interval)
        self._last_s = now

    def chunk_end_s(self) -> float | None:
        """How long from now a lower-priority chunk scheduled in this step may run until it ends: a chunk
        step (`free_s`), after the step in flight under asynchronous scheduling (`_in_flight_s`). None until
        a chunk step has been measured. Used by arrival hints that say when their turn is due (`hint.py`)."""
        free = self.free_s
        return None if free is None else free + self._in_flight_s(free)

    def step_end_s(self, share: float) -> float | None:
        """How long from now a held step scheduled now that carries `share` of a full chunk (0-1) may run
        until it ends: the step in flight under asynchronous scheduling (`_in_flight_s`), then a held step
        plus that share of what a chunk step costs above one (`free_s - held_s`). None until both kinds of
        step have been measured. Used by the ride before the turn (`hint_ride_tokens`)."""
        free, held = self.free_s, self.held_s
        if free is None or held is None:
            return None
        return held + share * max(free - held, 0.0) + self._in_flight_s(free)

    def _in_flight_s(self, free: float) -> float:
        """What is left of the step in flight before a step scheduled now starts: nothing under synchronous
        scheduling; under asynchronous scheduling the step scheduled last, `free` if it carried a chunk,
        else `held_s` (or `free` while that is unmeasured)."""
        if self.lag == 0:
            return 0.0
        in_flight = self._kinds[-1] if self._kinds else self.OTHER
        if in_flight == self.FREE or self.held_s is None:
            return free
        return self.held_s

    def scheduled(self, held: bool, chunked: bool, empty: bool) -> None:
        """What the step just scheduled was: held (some lower-priority work kept out), or not held and
        carrying a prefill chunk (`chunked`), or anything else (an empty step's interval is idle time)."""
        kind = self.OTHER if empty else self.HELD if held else self.FREE if chunked else self.OTHER
        self._kinds.append(kind)


def _ewma(old: float | None, new: float, alpha: float) -> float:
    return new if old is None else old + alpha * (new - old)


class SentenceLengths:
    """How many tokens protected replies' first sentences took, the last `SENTENCE_SAMPLES` of them."""

    def __init__(self, window_tokens: int) -> None:
        self.window_tokens = window_tokens
        self._seen: deque[int] = deque(maxlen=SENTENCE_SAMPLES)

    def __len__(self) -> int:
        return len(self._seen)

    def add(self, tokens: int) -> None:
        self._seen.append(max(1, min(tokens, self.window_tokens)))

    def tokens_left(self, produced: int) -> int:
        """The tokens a reply that has produced `produced` without ending its first sentence is expected to
        need still (at least 1): the `SENTENCE_QUANTILE` percentile of the remembered first sentences
        longer than `produced`, or the rest of the window when too few are remembered."""
        rest = self.window_tokens - produced
        if len(self._seen) < MIN_SENTENCE_SAMPLES:
            return max(rest, 1)
        longer = [n for n in self._seen if n > produced]
        if not longer:  # longer than every one seen: held to the window's end
            return max(rest, 1)
        expected = int(np.ceil(np.percentile(longer, SENTENCE_QUANTILE)))
        return max(min(expected, self.window_tokens) - produced, 1)


def at_risk(
    elapsed_s: float, deadline_s: float, tokens_left: int, held_s: float | None, free_s: float | None
) -> bool:
    """Whether a decoding protected reply needs this step held: letting lower-priority prefill in (one step
    at the free pace, then the rest held) would end its first sentence after `deadline_s`. Unmeasured
    paces count as at risk."""
    if held_s is None or free_s is None:
        return True
    return elapsed_s + free_s + tokens_left * held_s > deadline_s
