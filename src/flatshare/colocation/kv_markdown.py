"""Where the simulated engine's KV cache went, per condition (`ConditionResult.kv_ledger`), as report.md's
tables: one per caller count, stock (`vllm-priority`) first, then make-room's variants and the agents-only
reference, each with the cache's share held by the voice turns and by the agents (and of that, by requests
waiting for an asynchronous KV load), free, and free while a request waited for admission, beside the
agents' rate against stock's.

The reading it supports (docs/make-room.md, "Where the agents' share goes"): the agents here are bound by
memory (3-4 of their 10-16k-token contexts fit), so their rate follows their share of the cache; memory left
free while a request waits is memory the queue's head could not use (it did not fit, or the hold kept it
out).
"""

from __future__ import annotations

from flatshare.colocation.goal import STOCK
from flatshare.colocation.results import ColocationSummary, ConditionResult
from flatshare.colocation.steps_markdown import shown
from flatshare.policy.classes import AGENT_PRIORITY, VOICE_PRIORITY
from flatshare.sim.kv_ledger import shares

HEADER = (
    "| condition | voice's share of the cache | agents' share | of it, waiting for a KV load | free "
    "| free while a request waited | agents' rate vs stock |"
)


def _cell(value: float | None) -> str:
    return "-" if value is None else f"{value:.1%}"


def _row(key: str, m: ConditionResult) -> str:
    share = shares(m.kv_ledger)
    rate = "-" if m.agent_throughput_ratio is None else f"{m.agent_throughput_ratio:.3f}"
    cells = [
        f"`{key}`",
        _cell(share.get(f"priority_{VOICE_PRIORITY}", 0.0)),
        _cell(share.get(f"priority_{AGENT_PRIORITY}", 0.0)),
        _cell(share.get("loading")),
        _cell(share.get("free")),
        _cell(share.get("free_waiting")),
        rate,
    ]
    return "| " + " | ".join(cells) + " |"


def kv_lines(summary: ColocationSummary) -> list[str]:
    """The section (none when no caller count has stock's KV ledger: real engines, or runs saved before
    it)."""
    lines: list[str] = []
    for callers in summary.callers:
        conditions = summary.by_callers[callers].conditions
        stock = conditions.get(STOCK)
        if stock is None or not shares(stock.kv_ledger):
            continue
        rows = [_row(k, conditions[k]) for k in shown(conditions, lambda m: shares(m.kv_ledger))]
        lines += [f"### {callers} callers", "", HEADER, "|---" * 7 + "|", *rows, ""]
    if not lines:
        return []
    intro = (
        "Mean per run over the run's duration (the drain left out), from the simulated engine's KV ledger "
        "(`flatshare.sim.kv_ledger`): the share of the cache's block-seconds, weighted by step time, held by "
        "the voice turns' requests and by the agents' (a block shared by both counts for the voice), the "
        "part of that held by requests waiting for an asynchronous KV load (admitted, nothing of them "
        "scheduled until it is in), and free (unheld; cached blocks included), in all and while some "
        "request waited for admission. The "
        "agents here are bound by memory, so their rate follows their share of the cache: memory free "
        "while a request waits is memory the head of the queue could not use (it did not fit, or the hold "
        "kept it out)."
    )
    return ["## Where the KV cache went", "", intro, "", *lines]
