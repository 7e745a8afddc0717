"""Where each request's time before its first token goes, step by step (the write-up's Figure 02, split).

The ledger follows every request from the moment it is sent until the step that samples its first token,
and charges each stretch of that time to one part. The parts add up to the measured time to first token:

- `api`: the serving front end's pass (the profile's `api_latency_s`) before the engine sees the request.
- `in_flight`: the engine saw it while a step ran; the scheduler only looks again when that step ends.
- `token_budget`: a step it was not in because the requests scheduled before it (vLLM schedules the
  running ones first) used the whole `max_num_batched_tokens`.
- `seats`: a step it was not in because every seat (`max_num_seqs`) was taken.
- `kv_memory`: a step it was not in although the budget had room and a seat was free: vLLM could not
  allocate its KV blocks (free blocks, the watermark, the full-prompt admission rule), or the step preempted a
  running request that could not grow (vLLM then admits no waiting request), or the queue's head was
  blocked for one of these reasons.
- `kv_behind_load`: the same, but vLLM never tried it: requests holding KV blocks (loaded from the CPU
  tier, waiting for the rest of their blocks: `kv_holding_waiting`) are drained first, and while one of
  them cannot get its blocks vLLM 0.32 looks at no other waiting request. The first seed's "waiting
  behind memory the agents had reserved for their loads".
- `cpu_load`: steps (and idle time) while its KV was loading from the CPU tier (`WAITING_FOR_REMOTE_KVS`),
  and the start of the step that loaded it synchronously, before that step's forward (`sync_load`).
- `store_flush`: time between steps when the engine could not start the next step before stores to the
  CPU tier of blocks it reuses had finished (vLLM's offloading connector flushes such stores).
- `prefill`: steps that computed its own prompt, up to and including the one that sampled its first token
  (beside whatever else those steps carried).
- `idle`: time between steps for no reason above (none is expected; kept so the parts always add up).

The classification reads vLLM's scheduler after each step, in the order vLLM's `schedule()` checks for a
waiting request (token budget, then seats, then KV allocation); a request a scheduler plug-in set aside
is classified by the same rules.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

WAIT_PARTS = (
    "api",
    "in_flight",
    "token_budget",
    "seats",
    "kv_memory",
    "kv_behind_load",
    "cpu_load",
    "store_flush",
    "prefill",
    "idle",
)


class WaitLedger:
    """Charges time before the first token to parts; `waits[request_id]` holds each request's parts."""

    def __init__(self, max_num_batched_tokens: int, max_num_seqs: int) -> None:
        self.max_num_batched_tokens = max_num_batched_tokens
        self.max_num_seqs = max_num_seqs
        self.waits: dict[str, dict[str, float]] = {}
        self._since: dict[str, float] = {}

    def admit(self, request_id: str, sent_s: float, engine_arrival_s: float, now: float) -> None:
        """The scheduler gets the request at `now` (it reached the engine at `engine_arrival_s`)."""
        parts = dict.fromkeys(WAIT_PARTS, 0.0)
        parts["api"] = max(engine_arrival_s - sent_s, 0.0)
        parts["in_flight"] = max(now - max(engine_arrival_s, sent_s), 0.0)
        self.waits[request_id] = parts
        self._since[request_id] = now

    def gap(self, until_s: float, part: str, scheduler: Any) -> None:
        """Time with no step running up to `until_s`: loads go to `cpu_load`, the rest to `part`."""
        for request_id, since in list(self._since.items()):
            if until_s <= since:
                continue
            request = scheduler.requests.get(request_id)
            waiting_load = _loading(request)
            self.waits[request_id]["cpu_load" if waiting_load else part] += until_s - since
            self._since[request_id] = until_s

    def not_scheduled_reason(self, scheduled: Mapping[str, int], running: int, holding: bool = False) -> str:
        """Why a waiting request was left out of a step that scheduled `scheduled` tokens per request
        with `running` requests running, `holding` if vLLM's queue of requests holding KV blocks was
        still not empty after it (all read right after `schedule()`, before outputs are applied)."""
        if sum(scheduled.values()) >= self.max_num_batched_tokens:
            return "token_budget"
        if running >= self.max_num_seqs:
            return "seats"
        return "kv_behind_load" if holding else "kv_memory"

    def step(
        self,
        start_s: float,
        end_s: float,
        scheduled: Mapping[str, int],
        reason: str,
        scheduler: Any,
        first_token_ids: set[str],
        gap_part: str = "idle",
        sync_loads: Mapping[str, float] | None = None,
    ) -> None:
        """A step ran from `start_s` to `end_s` with `scheduled` tokens per request, leaving waiting
        requests out for `reason` (`not_scheduled_reason`); the requests in `first_token_ids` got their
        first token from it; `sync_loads` the seconds its start spent loading a scheduled request's KV
        before the forward. Call after the step's outputs are applied."""
        self.gap(start_s, gap_part, scheduler)
        if not self._since:
            return
        for request_id, since in list(self._since.items()):
            if end_s > since:
                request = scheduler.requests.get(request_id)
                loading = min((sync_loads or {}).get(request_id, 0.0), end_s - since)
                if request_id in scheduled:
                    part = "prefill"
                    self.waits[request_id]["cpu_load"] += loading
                    since += loading
                elif _loading(request):
                    part = "cpu_load"
                elif reason == "kv_behind_load" and request is not None and _holds_kv(request):
                    part = "kv_memory"  # it is the one holding loaded KV and waiting for the rest
                else:
                    part = reason
                self.waits[request_id][part] += end_s - since
                self._since[request_id] = end_s
            if request_id in first_token_ids:
                del self._since[request_id]


def _loading(request: Any) -> bool:
    """Whether vLLM parks this request while its KV loads (`RequestStatus.WAITING_FOR_REMOTE_KVS`); read by
    name so that analysis can import this module without importing vLLM."""
    return request is not None and request.status.name == "WAITING_FOR_REMOTE_KVS"


def _holds_kv(request: Any) -> bool:
    """Whether a waiting request already holds KV blocks (loaded, or kept while preempted)."""
    return request.num_computed_tokens > 0
