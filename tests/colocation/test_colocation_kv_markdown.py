"""report.md's "Where the KV cache went": the cache's shares beside the agents' rate."""

from __future__ import annotations

from flatshare.colocation.kv_markdown import kv_lines
from flatshare.colocation.results import CallerResult, ColocationSummary
from summarykit import condition


def _kv(
    voice: float, agents: float, free: float, free_waiting: float, loading: float = 0.0
) -> dict[str, float | None]:
    """A mean KV ledger over a 100-block cache for 10 s: block-seconds from shares."""
    return {
        "seconds": 10.0,
        "cache_block_s": 1000.0,
        "held_block_s_priority_0": voice * 1000,
        "held_block_s_priority_10": agents * 1000,
        "free_block_s": free * 1000,
        "free_block_s_waiting": free_waiting * 1000,
        "loading_block_s": loading * 1000,
        "window_s": 600.0,
    }


def _summary(**blocks: object) -> ColocationSummary:
    by = {6: CallerResult(1.97, blocks)}  # type: ignore[arg-type]
    return ColocationSummary(2, 1.25, (6,), by)


def test_each_variant_shows_the_cache_it_left_free_beside_the_agents_rate() -> None:
    stock = condition(kv_ledger=_kv(0.032, 0.842, 0.126, 0.123, 0.021), agent_throughput_ratio=1.0)
    held = condition(kv_ledger=_kv(0.035, 0.798, 0.166, 0.164, 0.043), agent_throughput_ratio=0.97)
    lines = kv_lines(_summary(**{"make-room-t48": held, "vllm-priority": stock, "alone": condition()}))
    assert lines[0] == "## Where the KV cache went"
    rows = [line for line in lines if line.startswith("| `")]
    assert rows == [
        "| `vllm-priority` | 3.2% | 84.2% | 2.1% | 12.6% | 12.3% | 1.000 |",
        "| `make-room-t48` | 3.5% | 79.8% | 4.3% | 16.6% | 16.4% | 0.970 |",
    ]


def test_no_section_without_stock_s_ledger_and_no_row_for_a_condition_without_one() -> None:
    real = {"vllm-priority": condition(), "make-room-t48": condition(kv_ledger=_kv(0.1, 0.8, 0.1, 0.1))}
    assert kv_lines(_summary(**real)) == []
    mixed = {"vllm-priority": condition(kv_ledger=_kv(0.1, 0.8, 0.1, 0.0)), "make-room-t48": condition()}
    rows = [line for line in kv_lines(_summary(**mixed)) if line.startswith("| `")]
    assert [r.split(" | ")[0] for r in rows] == ["| `vllm-priority`"]
