"""SGLang's priority-preemption rule as a pure function over make-room's policy types.

SGLang (`PrefillAdder.preempt_to_schedule`, python/sglang/srt/managers/schedule_policy.py, sgl-project/
sglang main at commit 00550cd1) walks the running requests from the least important (and, among equals,
the most recently queued) on, takes each whose priority is worse than the new request's by more than the
threshold, stops at the first that is not, and commits only if those taken free enough for the new
request; otherwise it preempts nobody. Nothing here imports vLLM.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from flatshare.scheduler import policy


@dataclass(frozen=True)
class SglangChoice:
    """The step's decision for the waiting request.

    `victims`: running requests to preempt, in order (empty when none are needed or none would do);
    `fits`: the request then fits in memory and seats; `declined`: eligible victims existed but all of
    them would not make it fit (SGLang then preempts nobody); `within_threshold`: it does not fit, some
    running request has a worse priority, but none by more than the threshold; `for_seats`: it waited
    for a seat (vLLM's `max_num_seqs`) rather than only for blocks.
    """

    victims: tuple[str, ...]
    fits: bool
    declined: bool = False
    within_threshold: bool = False
    for_seats: bool = False


def eligible(running_priority: int, waiting_priority: int, threshold: int) -> bool:
    """Whether a running request may be preempted for the waiting one: SGLang's `priority_diff >
    threshold`, in vLLM's sign (a larger value is less important)."""
    return running_priority - waiting_priority > threshold


def choose(
    admission: policy.WaitingNeed,
    running: Sequence[policy.RunningView],
    waiting_priority: int,
    threshold: int,
    ref_counts: dict[int, int],
) -> SglangChoice:
    """SGLang's victims for a waiting request that vLLM would not admit for memory or seats; none when it
    already fits (on memory and seats: the step's budgets are not SGLang's trigger)."""
    need = admission.without_budgets()
    if policy.fits(need, running, (), ref_counts):
        return SglangChoice((), fits=True)
    seats = need.seats_free <= 0
    chosen: list[policy.RunningView] = []
    for candidate in policy.vllm_victim_order(running):  # worst (priority, arrival) first
        if not eligible(candidate.priority, waiting_priority, threshold):
            break
        chosen.append(candidate)
        # "free enough": blocks vLLM returns once the step in flight is processed count (deferred frees
        # under async scheduling with a KV connector); the request is then admitted a step later.
        if policy.fits(need, running, chosen, ref_counts, deferred=True):
            return SglangChoice(tuple(r.request_id for r in chosen), fits=True, for_seats=seats)
    worse = any(r.priority > waiting_priority for r in running)
    return SglangChoice((), fits=False, declined=bool(chosen), within_threshold=worse and not chosen)
