"""The KV ledger: the cache's block-seconds by the priority that held them, and free, over a window."""

from __future__ import annotations

import pytest

from flatshare.sim.config import EngineConfig, fitting_model_len
from flatshare.sim.engine import SimEngine, StepReport
from flatshare.sim.kv_ledger import KvLedger, held_by_priority, held_key, shares
from flatshare.sim.profile import load_profile
from flatshare.sim.step_ledger import summed
from simkit import req


def test_a_block_several_requests_hold_counts_once_for_the_most_protected() -> None:
    held = held_by_priority([(10, [1, 2, 3]), (0, [3, 4]), (10, [4, 5]), (0, [4])])
    assert held == {10: 3, 0: 2}  # blocks 1, 2, 5 for priority 10; 3 and 4 for priority 0
    assert held_by_priority([]) == {}


def test_steps_are_weighted_by_their_time_and_free_memory_counted_apart_while_a_request_waits() -> None:
    ledger = KvLedger(until_s=1.0)
    ledger.add(0.0, 0.1, {0: 10, 10: 60}, free_blocks=30, total_blocks=100, waiting=True, loading_blocks=20)
    ledger.add(0.1, 0.4, {10: 90}, free_blocks=10, total_blocks=100, waiting=False)
    ledger.add(1.0, 1.5, {10: 100}, free_blocks=0, total_blocks=100, waiting=True)  # past the window
    table = ledger.to_json()
    assert table["seconds"] == pytest.approx(0.4)
    assert table["cache_block_s"] == pytest.approx(40.0)
    assert table[held_key(0)] == pytest.approx(1.0)
    assert table[held_key(10)] == pytest.approx(6.0 + 27.0)
    assert table["free_block_s"] == pytest.approx(3.0 + 3.0)
    assert table["free_block_s_waiting"] == pytest.approx(3.0)
    assert table["loading_block_s"] == pytest.approx(2.0)
    assert table["window_s"] == 1.0
    share = shares(table)
    assert share == pytest.approx(
        {"free": 0.15, "free_waiting": 0.075, "loading": 0.05, "priority_0": 0.025, "priority_10": 0.825}
    )


def test_a_step_that_holds_more_than_the_cache_or_ends_before_it_starts_is_refused() -> None:
    ledger = KvLedger()
    with pytest.raises(ValueError, match="exceed the cache"):
        ledger.add(0.0, 0.1, {10: 80}, free_blocks=30, total_blocks=100, waiting=False)
    with pytest.raises(ValueError, match="loading blocks are some of the held"):
        ledger.add(0.0, 0.1, {10: 10}, free_blocks=0, total_blocks=100, waiting=False, loading_blocks=11)
    with pytest.raises(ValueError, match="ends after it starts"):
        ledger.add(0.2, 0.1, {}, free_blocks=0, total_blocks=100, waiting=False)
    assert shares(ledger.to_json()) == {}  # nothing counted: no shares


def test_engines_ledgers_add_and_their_shares_are_of_both_caches() -> None:
    a, b = KvLedger(until_s=60.0), KvLedger(until_s=60.0)
    a.add(0.0, 1.0, {10: 100}, free_blocks=0, total_blocks=100, waiting=True)
    b.add(0.0, 1.0, {}, free_blocks=100, total_blocks=100, waiting=True)
    total = summed([a.to_json(), b.to_json()])
    assert total["window_s"] == 60.0
    assert shares(total) == pytest.approx(
        {"free": 0.5, "free_waiting": 0.5, "loading": 0.0, "priority_10": 0.5}
    )


@pytest.mark.vllm
@pytest.mark.parametrize("async_scheduling", [False, True])
def test_an_engine_run_accounts_for_its_cache_within_the_window(async_scheduling: bool) -> None:
    kv = 8000
    config = EngineConfig(
        kv_tokens=kv, max_model_len=fitting_model_len(kv, 16), async_scheduling=async_scheduling
    )
    engine = SimEngine(config, load_profile("llama3-8b-24gb"))
    steps: list[StepReport] = []
    engine.on_step = steps.append
    engine.kv_ledger.until_s = 2.0
    # More prompt than the cache holds: some requests wait while others run.
    requests = [
        req(f"r{i}", 0.05 * i, 1500 + 200 * i, 40, priority=0 if i % 3 == 0 else 10) for i in range(9)
    ]
    engine.run(requests)
    counted = [s for s in steps if s.start_s < 2.0 and s.end_s > s.start_s]
    ledger = engine.kv_ledger
    assert ledger.seconds == pytest.approx(sum(s.end_s - s.start_s for s in counted), rel=1e-9)
    share = shares(ledger.to_json())
    assert share["priority_0"] > 0 and share["priority_10"] > 0
    assert 0 < share["free_waiting"] <= share["free"]
    assert share["priority_0"] + share["priority_10"] + share["free"] <= 1.0 + 1e-9
    held = share["priority_0"] + share["priority_10"]
    usage = 1.0 - share["free"]
    assert held == pytest.approx(usage, abs=0.02), "blocks held by live requests are the cache in use"
