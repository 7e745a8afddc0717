"""make-room's protected prefix pin (`make_room.pin_share`) on vLLM's real scheduler, in the simulated engine."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from flatshare.scheduler import MakeRoomConfig, MakeRoomConfigError
from flatshare.scheduler.pin import PrefixPins, cap_blocks, pinnable_blocks, without_pins
from flatshare.sim.config import EngineConfig, fitting_model_len
from flatshare.sim.engine import SimEngine, StepReport
from flatshare.sim.profile import load_profile
from flatshare.sim.requests import SimRequest
from simkit import req

pytestmark = pytest.mark.vllm

KV = 8192  # 512 blocks: three 2,400-token agents and their growth evict a finished 2,000-token prefix


def burst() -> list[SimRequest]:
    """A voice turn on a 2,000-token system prompt, an agents' burst, then the next turn."""
    first = req("v1", 0.0, 2000, 8, priority=0, group="system")
    agents = [req(f"a{i}", 1.0, 2400, 300, priority=10) for i in range(3)]
    second = req("v2", 6.0, 2048, 8, priority=0, group="system")
    return [first, *agents, second]


def prefilled(
    settings: dict[str, object] | None, tmp: Path | None = None
) -> tuple[dict[str, int], SimEngine]:
    """Tokens each request computed (prefix hits are not computed), and the engine after the run."""
    config = EngineConfig(kv_tokens=KV, max_model_len=fitting_model_len(KV, 16), max_num_batched_tokens=512)
    if settings is not None:
        section = {"enabled": True, **settings}
        if tmp is not None:
            section["trace_path"] = str(tmp / "trace.jsonl")
        config = config.with_changes(scheduler="make-room", additional_config={"make_room": section})
    engine = SimEngine(config, load_profile())
    computed: dict[str, int] = {}

    def count(report: StepReport) -> None:
        for rid, n in report.scheduled.items():
            computed[rid] = computed.get(rid, 0) + n

    engine.on_step = count
    result = engine.run(burst())
    assert all(r.status == "finished" for r in result.records)
    return computed, engine


def test_the_pin_keeps_the_protected_prefix_through_a_burst_that_evicts_it_under_stock(
    tmp_path: Path,
) -> None:
    stock, _ = prefilled(None)
    assert stock["v2"] >= 1500  # the agents evicted most of the system prompt: recomputed
    pinned, engine = prefilled({"pin_share": 0.3, "pin_yields_to": "protected"}, tmp_path)
    assert pinned["v2"] <= 2048 - 2000 + 16 + 8  # the pinned prompt was a hit: the tail and decodes only
    counters = engine.scheduler.flatshare_counters()
    assert counters["pinned_blocks"] >= 2000 // 16
    lines = [json.loads(line) for line in (tmp_path / "trace.jsonl").read_text().splitlines()]
    assert any("v1" in line.get("pinned", {}) for line in lines)  # traced: which request, how many blocks
    assert engine.scheduler.pinned_kv_blocks() <= cap_blocks(0.3, engine.config.num_gpu_blocks)


def test_yielding_to_all_the_pin_gives_way_and_vllm_decides_as_stock() -> None:
    """Yielding to every allocation, the pin releases what vLLM needs rather than cost a preemption: the
    burst evicts the prompt as without the pin, and nobody is preempted more than without it."""
    stock, stock_engine = prefilled({})
    pinned, engine = prefilled({"pin_share": 0.3, "pin_yields_to": "all"})
    counters = engine.scheduler.flatshare_counters()
    assert counters["pin_shortage_releases"] >= 1 and counters["pin_shortage_blocks"] >= 1
    assert engine.preemptions <= stock_engine.preemptions
    assert pinned["v2"] == stock["v2"]


def test_the_pin_is_off_by_default_and_bounded() -> None:
    assert MakeRoomConfig().pin_share == 0.0
    _, engine = prefilled({})
    assert engine.scheduler.flatshare_counters()["pinned_blocks"] == 0
    for bad in ({"pin_share": 0.9}, {"pin_share": -0.1}, {"pin_share": "0.1"}, {"pin_yields_to": "agents"}):
        with pytest.raises(MakeRoomConfigError, match="pin_"):
            MakeRoomConfig.from_additional_config({"make_room": bad})


def test_prefix_pins_release_the_least_recently_pinned_tail_first() -> None:
    """Over the cap, the oldest pins go first, and a request's blocks are refreshed from its last to its
    first, so a prefix's head (what every turn hits) outlives its tail."""
    _, engine = prefilled({"pin_share": 0.3, "pin_yields_to": "protected"})
    scheduler = engine.scheduler
    pool = scheduler.kv_cache_manager.block_pool
    scheduler._pins.release_all()  # type: ignore[attr-defined]
    free = pool.get_num_free_blocks()
    engine.run([req("v3", engine.now + 1, 320, 400, priority=0, group="system")])  # 20 full prompt blocks
    scheduler._pins.release_all()  # type: ignore[attr-defined]
    pins = PrefixPins(pool, cap=4)
    blocks = [pool.blocks[b] for b in range(1, pool.num_gpu_blocks) if pool.blocks[b].block_hash is not None][
        :6
    ]
    assert len(blocks) == 6
    added, over = pins.pin(blocks)
    assert (added, over) == (4, 2)
    assert set(pins.held_by_pin()) == {b.block_id for b in blocks[:4]}  # the head kept, the tail released
    assert pool.get_num_free_blocks() == free - 4
    assert without_pins({blocks[0].block_id: 2, 999: 1}, [blocks[0].block_id]) == {
        blocks[0].block_id: 1,
        999: 1,
    }
    assert pins.release_lru(1) == 1 and len(pins) == 3
    assert pins.release_all() == 3 and pool.get_num_free_blocks() == free
    assert pinnable_blocks(scheduler.kv_cache_manager, "gone") == []
