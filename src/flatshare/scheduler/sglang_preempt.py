"""sglang-preempt: SGLang's priority preemption, as a baseline, on vLLM's v1 scheduler.

What SGLang does (read in sgl-project/sglang main: `PrefillAdder.preempt_to_schedule` in
python/sglang/srt/managers/schedule_policy.py at commit 00550cd1; its caller, the waiting-queue loop that
builds a prefill batch in python/sglang/srt/managers/scheduler.py, which calls it once `batch_is_full`
when `enable_priority_preemption`; `ScheduleBatch.release_req`; the server arguments
`--enable-priority-scheduling`, `--priority-scheduling-preemption-threshold` (default 10) and
`--disable-priority-preemption` (preemption on by default with priority scheduling)): when the batch is full
(a request did not fit in the KV pool, or `max_running_requests` is reached) and priority preemption is
on, the next waiting request may preempt running requests whose priority is worse than its own by more
than the threshold, least important (then most recently queued) first, only if together they free enough
for it; otherwise nobody. Victims' KV is released (`release_kv_cache(..., is_insert=False)`: their own
tokens are not kept in the radix cache) and they are reset to recompute from the waiting queue. Nothing is
held out of later batches: no window, no bound on victims.

This scheduler applies that rule, written anew (no SGLang code), before each vLLM `schedule()` step:
1. Take the waiting request vLLM will try to admit (`vllm_view.waiting_candidate`, as make-room does).
2. If vLLM would not admit it for blocks or seats, counted as vLLM counts (`vllm_view.waiting_need`,
   `policy.fits`), choose SGLang's victims (`sglang_policy.choose`) and preempt them through vLLM's own
   path (`Scheduler._preempt_request`): their blocks go back to the pool, hashed full blocks stay in
   vLLM's prefix cache until evicted (closer to SGLang's radix cache than SGLang's own victims get), and
   they resume by recomputing.
How it differs from SGLang, as it must inside vLLM: it acts for one waiting request a step (SGLang can
for each request of one prefill batch); "fits" is vLLM's admission (the prompt's blocks, or its first
chunk, plus the watermark), not SGLang's token estimate, which also reserves the new request's
`max_new_tokens` (clipped at 4096) and the running requests' estimated remaining output; and the request
then competes for the step's token budget after the running requests, as vLLM schedules (SGLang runs a
prefill batch first). How it differs from make-room: a threshold instead of any strictly lower priority,
no `max_victims`, no window and no hold, and no guard against acting twice for a request vLLM did not
admit (SGLang has none; `acted_not_admitted` counts those steps).

Under `--scheduling-policy fcfs` it stays out (with a warning), as make-room does: vLLM's FCFS queue
would put each victim back ahead of the request it was preempted for.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from vllm.v1.request import RequestStatus

from flatshare.scheduler import sglang_policy, vllm_view
from flatshare.scheduler.base import FlatshareScheduler
from flatshare.scheduler.sglang_config import SglangPreemptConfig, SglangPreemptConfigError

if TYPE_CHECKING:
    from vllm.v1.core.sched.output import SchedulerOutput

log = logging.getLogger(__name__)


@dataclass
class SglangPreemptCounters:
    """What sglang-preempt did, so a run shows whether the mechanism fired.

    `preemption_events`: steps in which it preempted; `preempted_requests`: victims in all;
    `preemptions_for_seats`: victims taken while the request waited for a seat; `declined_not_enough`:
    steps where eligible victims would not all have freed enough (nobody preempted);
    `within_threshold`: steps where the request did not fit and a running request had a worse priority,
    but none by more than the threshold; `async_load_admissions`: steps it preempted for a request vLLM
    then admitted into an asynchronous KV load (its blocks allocated; it runs once the load is in);
    `acted_not_admitted`: steps it preempted for a request vLLM then did not admit (the step's token
    budget went to the running requests first).
    """

    preemption_events: int = 0
    preempted_requests: int = 0
    preemptions_for_seats: int = 0
    declined_not_enough: int = 0
    within_threshold: int = 0
    async_load_admissions: int = 0
    acted_not_admitted: int = 0


class SglangPreemptMixin(FlatshareScheduler):
    """Overrides `schedule()` only; everything else is vLLM's."""

    alias = "sglang-preempt"
    config_class = SglangPreemptConfig
    config_error = SglangPreemptConfigError
    counters_class = SglangPreemptCounters

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.sglang_preempt: SglangPreemptConfig = self.flatshare_config
        self.sglang_preempt_stats: SglangPreemptCounters = self.flatshare_stats

    def schedule(self, *args: Any, **kwargs: Any) -> SchedulerOutput:
        if not self.flatshare_active:
            return super().schedule(*args, **kwargs)
        throttle = bool(kwargs.get("throttle_prefills", args[0] if args else False))
        acted_for = self._preempt_for_waiting(vllm_view.prefills_deferred(self, throttle))
        output = super().schedule(*args, **kwargs)
        if acted_for is not None and acted_for not in output.num_scheduled_tokens:
            request = self.requests.get(acted_for)
            if request is not None and request.status == RequestStatus.WAITING_FOR_REMOTE_KVS:
                self.sglang_preempt_stats.async_load_admissions += 1  # admitted: it runs once loaded
            else:
                self.sglang_preempt_stats.acted_not_admitted += 1
        return output

    def _preempt_for_waiting(self, deferred: bool) -> str | None:
        """Preempt SGLang's victims for the request vLLM tries first; its id when it preempted."""
        candidate = vllm_view.waiting_candidate(self)
        if candidate is None or (deferred and vllm_view.is_prefill(candidate)):
            return None
        if not any(r.priority > candidate.priority for r in self.running):
            return None  # nothing with a worse priority: vLLM decides alone
        views = vllm_view.running_views(self, None, False, deferred)
        need = vllm_view.waiting_need(self, candidate)
        refs = vllm_view.ref_counts(self, views, need)
        choice = sglang_policy.choose(need, views, candidate.priority, self.sglang_preempt.threshold, refs)
        stats = self.sglang_preempt_stats
        stats.declined_not_enough += int(choice.declined)
        stats.within_threshold += int(choice.within_threshold)
        if not choice.victims:
            return None
        vllm_view.preempt_running(self, choice.victims)
        stats.preemption_events += 1
        stats.preempted_requests += len(choice.victims)
        if choice.for_seats:
            stats.preemptions_for_seats += len(choice.victims)
        return str(candidate.request_id)
