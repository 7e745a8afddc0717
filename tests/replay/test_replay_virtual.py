"""The virtual-time driver: dependent sessions, several engines, records that pass the schema."""

from __future__ import annotations

import itertools

import pytest

from flatshare.listen.voice import VoicePipeline
from flatshare.replay.virtual import run_virtual
from flatshare.runfiles.records import ReplayRecord, schema_problems
from flatshare.sim.config import EngineConfig
from flatshare.sim.engine import SimEngine
from flatshare.sim.profile import load_profile
from flatshare.sim.requests import SimRequest
from flatshare.workloads.spec import parse_spec

pytestmark = pytest.mark.vllm


def _engines(n: int, **config: object) -> list[SimEngine]:
    return [SimEngine(EngineConfig(**config), load_profile()) for _ in range(n)]  # type: ignore[arg-type]


def test_sessions_issue_each_request_after_the_previous_reply() -> None:
    workload = parse_spec("voice-agents:callers=2,agents=3,duration=120", seed=1, max_model_len=32768)
    run = run_virtual(workload, _engines(1), until_s=120)
    by_session: dict[str, list[ReplayRecord]] = {}
    for record in run.records:
        by_session.setdefault(record.session_id, []).append(record)
    assert len(by_session) == 5
    for records in by_session.values():
        records.sort(key=lambda r: r.send_s)
        for prev, nxt in itertools.pairwise(records):
            assert prev.end_s is not None and nxt.send_s >= prev.end_s
    for record in run.records:
        assert schema_problems(record.to_json()) == []
        assert record.status == "ok" and len(record.token_times_s) == record.max_tokens


def test_same_workload_and_seed_give_identical_records() -> None:
    workload = parse_spec("voice-agents:callers=1,agents=2,duration=60", seed=3, max_model_len=32768)
    first = [r.to_json() for r in run_virtual(workload, _engines(1), until_s=60).records]
    second = [r.to_json() for r in run_virtual(workload, _engines(1), until_s=60).records]
    assert first == second


def test_requests_spread_over_several_engines_by_route() -> None:
    workload = parse_spec("long-short:long=20000,shorts=10", seed=0, max_model_len=32768)
    run = run_virtual(workload, _engines(2), route=lambda request, engines: 1 if request.cls == "long" else 0)
    engines = {r.cls: {x.engine for x in run.records if x.cls == r.cls} for r in run.records}
    assert engines["long"] == {"sim1"} and engines["short"] == {"sim0"}
    assert {name for name, _ in run.samples} == {"sim0", "sim1"}


def test_schema_check_catches_a_broken_record() -> None:
    workload = parse_spec("long-short:long=2000,shorts=2", seed=0, max_model_len=32768)
    good = run_virtual(workload, _engines(1)).records[0].to_json()
    assert schema_problems(good) == []
    assert schema_problems({**good, "status": "fine"})
    assert schema_problems({**good, "token_times_s": [3.0, 2.0], "output_tokens": 2})
    assert schema_problems({k: v for k, v in good.items() if k != "send_s"}) == ["field 'send_s': missing"]


def test_voice_turns_are_preceded_by_arrival_hints_that_stay_out_of_the_records() -> None:
    """With `hint_lead_s`, each voice turn is preceded by a one-token hint request carrying
    `flatshare_hint` in `extra_args`, sent `hint_lead_s` before the turn (not before the caller started
    speaking); agents send none, and the run's records hold only the workload's requests."""
    workload = parse_spec("voice-agents:callers=2,agents=2,duration=60", seed=1, max_model_len=32768)
    (engine,) = _engines(1)
    submitted: list[object] = []
    submit = engine.submit

    def recording(request: object) -> None:
        submitted.append(request)
        submit(request)  # type: ignore[arg-type]

    engine.submit = recording  # type: ignore[method-assign]
    run = run_virtual(workload, [engine], until_s=60, hint_lead_s=0.3)
    hints = {r.id: r for r in submitted if r.extra_args == {"flatshare_hint": "turn"}}  # type: ignore[attr-defined]
    turns = {r.id: r for r in run.records if r.session_id.startswith("voice")}
    assert turns and set(hints) == {f"{rid}/hint" for rid in turns}
    for rid, turn in turns.items():
        hint = hints[f"{rid}/hint"]
        assert hint.max_tokens == 1 and hint.priority == turn.priority  # type: ignore[attr-defined]
        assert turn.send_s - 0.3 - 1e-9 <= hint.arrival_s <= turn.send_s  # type: ignore[attr-defined]
    assert not any(r.id.endswith("/hint") for r in run.records)
    with pytest.raises(ValueError, match="hint_lead_s"):
        run_virtual(workload, _engines(1), until_s=60, hint_lead_s=-1)


def test_a_varying_recogniser_moves_each_turn_by_its_own_delay_and_hints_say_when_it_is_due() -> None:
    """With a pipeline whose recogniser's delay varies, each voice turn is sent its own delay after the
    end of speech (the hint's time), where the constant pipeline sends it the median after; the hints carry
    `flatshare_hint_in_s` when asked to. Agents' requests are not moved."""
    workload = parse_spec("voice-agents:callers=2,agents=1,duration=40", seed=3, max_model_len=32768)
    pipeline = VoicePipeline(asr_final_spread=0.37)

    def run(**options: object) -> tuple[dict[str, ReplayRecord], dict[str, SimRequest]]:
        (engine,) = _engines(1)
        submitted: list[SimRequest] = []
        submit = engine.submit

        def recording(request: SimRequest) -> None:
            submitted.append(request)
            submit(request)

        engine.submit = recording  # type: ignore[method-assign]
        result = run_virtual(workload, [engine], until_s=40, hint_lead_s=0.3, **options)  # type: ignore[arg-type]
        return {r.id: r for r in result.records}, {r.id: r for r in submitted if r.cls == "hint"}

    varied, hints = run(pipeline=pipeline, hint_in_s=0.19)
    first_turn = next(r for r in varied.values() if r.session_id.startswith("voice"))
    assert hints[f"{first_turn.id}/hint"].extra_args == {
        "flatshare_hint": "turn",
        "flatshare_hint_in_s": 0.19,
    }
    delays = []
    for rid, turn in varied.items():
        if turn.session_id.startswith("voice"):
            delay = turn.send_s - hints[f"{rid}/hint"].arrival_s
            assert delay == pytest.approx(pipeline.asr_final_for(rid))
            delays.append(delay)
    assert min(delays) < 0.3 < max(delays)  # some sooner than the median, some later
    constant, _ = run()
    first_agent = min(
        (r for r in constant.values() if not r.session_id.startswith("voice")), key=lambda r: r.send_s
    )
    assert varied[first_agent.id].send_s == first_agent.send_s
    with pytest.raises(ValueError, match="hint_in_s"):
        run_virtual(workload, _engines(1), until_s=40, hint_in_s=0.2)


def test_the_run_carries_the_engines_totals_not_the_engines() -> None:
    """`VirtualRun` is a plain value: preemptions, steps, scheduler counters, step and KV ledgers summed over
    the engines, the latest clock, and no engine inside (run folders are written from it alone)."""
    workload = parse_spec("voice-agents:callers=4,agents=4,duration=60", seed=2, max_model_len=8192)
    engines = _engines(2, kv_tokens=8208, max_model_len=8192, scheduler="make-room")
    run = run_virtual(workload, engines, until_s=60)
    assert all(not isinstance(value, SimEngine) for value in vars(run).values())
    assert all(e.steps > 0 for e in engines)  # both served: a total of one engine would differ
    assert run.preemptions == sum(e.preemptions for e in engines)
    assert run.steps == sum(e.steps for e in engines)
    assert run.virtual_s == max(e.now for e in engines)
    counters = [e.result().scheduler_counters for e in engines]
    assert run.scheduler_counters == {key: counters[0][key] + counters[1][key] for key in counters[0]}
    assert "make_room_events" in run.scheduler_counters
    assert run.totals() == {
        "preemptions": run.preemptions,
        "steps": run.steps,
        "virtual_s": run.virtual_s,
        "scheduler_counters": run.scheduler_counters,
        "step_ledger": run.step_ledger,
        "kv_ledger": run.kv_ledger,
    }
    ledgers = [e.ledger.to_json() for e in engines]
    assert run.step_ledger["steps"] == ledgers[0]["steps"] + ledgers[1]["steps"] > 0
    kv = [e.kv_ledger.to_json() for e in engines]
    assert run.kv_ledger["cache_block_s"] == pytest.approx(kv[0]["cache_block_s"] + kv[1]["cache_block_s"])
    assert run.kv_ledger["window_s"] == 60 and kv[0]["cache_block_s"] > 0
