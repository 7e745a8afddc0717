"""The simulated engine on vLLM's real scheduler: the seed's probe, determinism, invariants, CPU tier."""

from __future__ import annotations

import dataclasses

import pytest

from flatshare.sim.config import EngineConfig
from flatshare.sim.engine import SimEngine
from flatshare.sim.profile import load_profile
from flatshare.sim.requests import SimRequest
from simkit import by_id, req, run

pytestmark = pytest.mark.vllm

# Two 16k-token agent contexts fill a 32,400-token cache; a 600-token voice turn needs more than is left.
# With the default 40,960-token cache the same agents leave room. The turn arrives once both decode.
FULL_KV = 32400
ROOMY_KV = 40960


def _probe(kv_tokens: int, voice_arrival: float = 8.0) -> tuple[float, float]:
    """(voice TTFT, KV use sampled just before the voice turn arrived)."""
    agents = [req(f"agent{i}", 0.0, 16000, 1500, priority=10) for i in range(2)]
    voice = req("voice", voice_arrival, 600, 30, priority=0)
    result = run([*agents, voice], kv_tokens=kv_tokens)
    ttft = by_id(result)["voice"].ttft_s  # type: ignore[attr-defined]
    before = [s.kv_usage for s in result.samples if s.t <= voice_arrival]
    return ttft, before[-1]


def test_voice_turn_waits_for_memory_when_agents_fill_the_cache() -> None:
    ttft, kv_at_arrival = _probe(FULL_KV)
    assert kv_at_arrival > 0.95, "the probe must send the turn after the cache has filled"
    assert ttft > 1.0


def test_voice_turn_does_not_wait_while_the_cache_has_room() -> None:
    ttft, kv_at_arrival = _probe(ROOMY_KV)
    assert kv_at_arrival < 0.85
    assert ttft < 0.3


def test_same_inputs_give_identical_records() -> None:
    requests = [req(f"a{i}", 0.3 * i, 3000 + 500 * i, 40, priority=i % 3, group="g") for i in range(8)]
    first = run(requests, kv_tokens=8000, cpu_tier_tokens=4000)
    second = run(requests, kv_tokens=8000, cpu_tier_tokens=4000)
    assert [dataclasses.asdict(r) for r in first.records] == [dataclasses.asdict(r) for r in second.records]
    assert first.samples == second.samples


def test_every_request_completes_with_all_its_tokens_under_pressure() -> None:
    requests = [req(f"r{i}", 0.1 * i, 1500 + 97 * i, 200 + 17 * i, priority=i % 4) for i in range(20)]
    result = run(requests, kv_tokens=6000, max_num_seqs=8)
    assert result.preemptions > 0, "the workload must exercise preemption"
    for record in result.records:
        assert record.status == "finished"
        assert len(record.token_times_s) == record.max_tokens
        assert record.token_times_s == sorted(record.token_times_s)


def test_token_budget_and_running_limit_hold_every_step() -> None:
    engine = SimEngine(
        EngineConfig(kv_tokens=6000, max_model_len=4096, max_num_batched_tokens=256, max_num_seqs=4),
        load_profile(),
    )
    budgets: list[int] = []
    engine.on_step = lambda step: budgets.append(step.scheduled_tokens)
    engine.run([req(f"r{i}", 0.0, 900, 30) for i in range(10)])
    assert max(budgets) <= 256
    assert engine.scheduler.kv_cache_manager.block_pool.get_num_free_blocks() == 6000 // 16 - 1


def test_prefix_cache_makes_a_repeated_context_fast() -> None:
    first = req("call1", 0.0, 12000, 10, group="session")
    second = req("call2", 10.0, 12200, 10, group="session")
    records = by_id(run([first, second]))
    assert records["call2"].ttft_s < records["call1"].ttft_s / 10  # type: ignore[attr-defined]


def test_cpu_tier_reloads_an_evicted_context_instead_of_recomputing() -> None:
    # call1's context is evicted from the GPU by another agent, then the session resumes.
    requests = [
        req("call1", 0.0, 12000, 10, group="s1"),
        req("other", 6.0, 12000, 10, group="s2"),
        req("call2", 12.0, 12100, 10, group="s1"),
    ]
    without = by_id(run(requests, kv_tokens=16000))["call2"].ttft_s  # type: ignore[attr-defined]
    result = run(requests, kv_tokens=16000, cpu_tier_tokens=40000)
    with_tier = by_id(result)["call2"].ttft_s  # type: ignore[attr-defined]
    assert result.cpu_loaded_tokens >= 4000
    assert with_tier < without / 4


def test_samples_every_half_second_report_vllm_metrics() -> None:
    result = run([req("a", 0.0, 8000, 50, priority=1)])
    times = [s.t for s in result.samples]
    assert times[:3] == [0.0, 0.5, 1.0]
    assert max(s.kv_usage for s in result.samples) > 0.15
    assert max(s.running for s in result.samples) == 1


def test_requests_submitted_later_arrive_at_their_time() -> None:
    engine = SimEngine(EngineConfig(), load_profile())
    engine.submit(req("early", 0.0, 100, 5))
    while engine.step() is not None:
        pass
    engine.submit(req("late", 30.0, 100, 5))
    result = engine.run()
    late = by_id(result)["late"]
    assert late.first_scheduled_s == pytest.approx(30.0)  # type: ignore[attr-defined]


def test_a_voice_replys_first_sentence_ends_with_the_sentence_end_token() -> None:
    """`SimRequest.first_sentence_tokens`: the simulated model samples `SENTENCE_END_TOKEN` as the first
    sentence's last token, and never otherwise (make-room's `sentence_end_token_ids` reads it)."""
    from flatshare.colocation.experiment import SENTENCE_END_TOKEN as EXPERIMENT_END
    from flatshare.sim.engine import SENTENCE_END_TOKEN

    assert EXPERIMENT_END == SENTENCE_END_TOKEN
    engine = SimEngine(EngineConfig(), load_profile())
    outputs: dict[str, list[int]] = {}

    def snapshot(_: object) -> None:
        for rid, request in engine.scheduler.requests.items():
            outputs[rid] = list(request.output_token_ids)

    engine.on_step = snapshot
    voice = SimRequest("v", 0.0, tuple(range(5, 105)), 20, 0, "voice", first_sentence_tokens=7)
    engine.run([voice, SimRequest("a", 0.0, tuple(range(5, 105)), 20, 10, "agent")])
    assert outputs["v"][6] == SENTENCE_END_TOKEN and outputs["v"].count(SENTENCE_END_TOKEN) == 1
    assert SENTENCE_END_TOKEN not in outputs["a"]
