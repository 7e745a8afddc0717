"""make-room's settings, read from vLLM's `--additional-config '{"make_room": {...}}'`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from flatshare.scheduler.sections import read_section

CONFIG_KEY = "make_room"
PIN_YIELDS = ("all", "protected")


class MakeRoomConfigError(ValueError):
    """Invalid make-room settings; raised when the scheduler is built, so vLLM fails at start-up."""


@dataclass(frozen=True)
class MakeRoomConfig:
    """make-room's settings.

    `enabled`: off by default, and then the scheduler behaves exactly as vLLM's.
    `max_victims`: at most this many running requests are preempted in one step for a waiting one, and
    none at all if that many would not free enough blocks.
    `window_tokens` (T): while a protected request prefills or has produced fewer than T tokens,
    lower-priority requests get no prefill tokens in the step (0 turns the hold off).
    `hold_decode`: hold their decode as well.
    `protect_priority`: requests whose priority value is at or below it are protected.
    `preempt_for_seats`: when the protected request waits only for a seat (`max_num_seqs` running),
    preempt one strictly lower-priority request for it (vLLM issue #40004).
    `max_hold_steps`: the hold's bound; after this many steps in a row that held lower priorities,
    one step holds nothing, so they always make progress.
    `max_connector_deferrals`: a request make-room acted for that a KV connector deferred (vLLM's
    offloading connector answers "ask again" while blocks the request would hit are being stored or
    loaded) is acted for again at most this many steps in a row; then it counts as a misprediction and
    make-room waits until vLLM schedules it (0: the first deferral does).
    `pin_share`: the protected prefix pin (`pin.py`): a finished protected request's prefix-cached blocks
    stay resident on the GPU, at most this share of the KV cache (least recently pinned released first;
    released, least recently pinned first, whenever vLLM's own allocation would fail). 0 turns it off.
    `pin_yields_to`: whose allocations the pin gives way to: "all" (never a preemption or a refused
    admission stock vLLM would not have; the pin is then only an eviction order) or "protected" (lower
    priorities run as on a cache `pin_share` smaller; a step it left with nothing scheduled releases it).
    `recompute_tail_tokens`: when the KV connector (the CPU tier) offers a protected request an external
    hit of fewer tokens than this, the request recomputes them instead of waiting out an asynchronous
    load (`tail.py`). 0 turns it off.
    `hint_window_s`: an arrival hint (a protected request whose `SamplingParams.extra_args` carry
    `{"flatshare_hint": "turn"}`, `hint.py`) holds lower-priority prefill for at most this many seconds,
    or until a protected request arrives. 0 turns hints off (a hint is then an ordinary tiny request).
    `hold_deadline_s`: hold only while at risk (`pace.py`): a protected reply's first sentence is due
    this many seconds after the request arrived, and once it decodes, a step holds lower priorities for
    it only when, at the step durations make-room has measured, letting them in would make it late (its
    expected first-sentence length learnt from the sentences seen to close: give
    `sentence_end_token_ids`, else the whole window counts). Before its first token it is always
    held. 0 holds every step of the window.
    `sentence_end_token_ids`: token ids that end a sentence in the served model's vocabulary (".", "!",
    "?" and their variants); when given, a protected request's window also closes once it has sampled one,
    so the hold lasts the reply's first sentence, at most T tokens. Empty: the window is T tokens.
    `hold_ride_tokens`: the ride (`ride.py`): in a held step where no protected request prefills or
    waits, held running prefills still get this many tokens in all, in vLLM's running order. 0 turns it
    off (the hold keeps all lower-priority prefill out).
    `hold_ride_max_context`: with the ride on, only a request whose context after its chunk is at most
    this many tokens rides (a chunk's attention grows with the context it reads). 0: any context.
    `hold_ride_waiting`: with the ride on, held waiting requests ride too, after the running ones: vLLM
    admits them with a chunk of the ride (their context counted as their whole prompt, whose prefix hits
    are found only in the step).
    `hint_ride_tokens`: the ride before the turn (`ride.py`): in a step held for arrival hints alone (no
    protected request in its window; the turn has not arrived), held running prefills still get this
    many tokens in all, as long as such a step, scheduled now, ends before the earliest holding hint's
    turn is due at the pace make-room has measured (hints that say no due time get no ride), so the
    turn finds a held step in flight. Overrides `hold_ride_tokens` in those steps;
    `hold_ride_max_context` and `hold_ride_waiting` apply to it too. Needs `hint_window_s`. 0: off.
    `trace_path`: if set, append one JSON line per step in which make-room acted or held; the file
    must be writable when the scheduler is built.
    `allow_untested_vllm`: run on a vLLM version make-room was not tested against (a warning instead of
    a start-up error); the environment variable FLATSHARE_ALLOW_UNTESTED_VLLM=1 does the same.
    """

    enabled: bool = False
    max_victims: int = 2
    window_tokens: int = 48
    hold_decode: bool = False
    protect_priority: int = 0
    preempt_for_seats: bool = True
    max_hold_steps: int = 128
    max_connector_deferrals: int = 8
    pin_share: float = 0.0
    pin_yields_to: str = "all"
    recompute_tail_tokens: int = 0
    hint_window_s: float = 0.0
    hold_deadline_s: float = 0.0
    sentence_end_token_ids: tuple[int, ...] = ()
    hold_ride_tokens: int = 0
    hold_ride_max_context: int = 0
    hold_ride_waiting: bool = False
    hint_ride_tokens: int = 0
    trace_path: str | None = None
    allow_untested_vllm: bool = False

    def __post_init__(self) -> None:
        for name in (
            "enabled",
            "hold_decode",
            "preempt_for_seats",
            "hold_ride_waiting",
            "allow_untested_vllm",
        ):
            if not isinstance(getattr(self, name), bool):
                raise MakeRoomConfigError(
                    f"make_room.{name} must be true or false, got {getattr(self, name)!r}"
                )
        for name, minimum in (
            ("max_victims", 1),
            ("window_tokens", 0),
            ("max_hold_steps", 1),
            ("max_connector_deferrals", 0),
            ("recompute_tail_tokens", 0),
            ("hold_ride_tokens", 0),
            ("hold_ride_max_context", 0),
            ("hint_ride_tokens", 0),
        ):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
                raise MakeRoomConfigError(f"make_room.{name} must be an integer >= {minimum}, got {value!r}")
        for name, high in (("pin_share", 0.5), ("hint_window_s", 10.0), ("hold_deadline_s", 60.0)):
            value = getattr(self, name)
            ok = isinstance(value, int | float) and not isinstance(value, bool) and 0 <= value <= high
            if not ok:
                raise MakeRoomConfigError(f"make_room.{name} must be a number in [0, {high}], got {value!r}")
        ends = self.sentence_end_token_ids
        if not isinstance(ends, tuple | list) or not all(
            isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in ends
        ):
            raise MakeRoomConfigError(
                f"make_room.sentence_end_token_ids must be a list of token ids >= 0, got {ends!r}"
            )
        object.__setattr__(self, "sentence_end_token_ids", tuple(ends))
        if self.pin_yields_to not in PIN_YIELDS:
            raise MakeRoomConfigError(
                f"make_room.pin_yields_to must be one of {PIN_YIELDS}, got {self.pin_yields_to!r}"
            )
        if self.hold_deadline_s and not self.window_tokens:
            raise MakeRoomConfigError("make_room.hold_deadline_s needs make_room.window_tokens > 0")
        for name in ("hold_ride_max_context", "hold_ride_waiting"):
            if getattr(self, name) and not (self.hold_ride_tokens or self.hint_ride_tokens):
                raise MakeRoomConfigError(
                    f"make_room.{name} needs make_room.hold_ride_tokens or make_room.hint_ride_tokens > 0"
                )
        if self.hint_ride_tokens and not self.hint_window_s:
            raise MakeRoomConfigError("make_room.hint_ride_tokens needs make_room.hint_window_s > 0")
        if not isinstance(self.protect_priority, int) or isinstance(self.protect_priority, bool):
            raise MakeRoomConfigError(
                f"make_room.protect_priority must be an integer, got {self.protect_priority!r}"
            )
        if self.trace_path is not None and not (isinstance(self.trace_path, str) and self.trace_path):
            raise MakeRoomConfigError("make_room.trace_path must be a non-empty string")

    @classmethod
    def from_additional_config(cls, additional: Mapping[str, Any] | None) -> MakeRoomConfig:
        """Read `additional_config["make_room"]`; absent means disabled. Unknown keys are errors."""
        return read_section(additional, CONFIG_KEY, cls, MakeRoomConfigError)
