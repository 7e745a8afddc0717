"""The README's co-location tables, generated from a `summary.json` so they cannot drift from it.

The README marks each generated block with a pair of comments, `<!-- generated: NAME -->` and
`<!-- end generated: NAME -->`; `render` rewrites what lies between them (`tools/readme_tables.py` writes
the README, a test fails when the README differs from `render`'s output on the committed summary.json).
Blocks: `seed-table` (the seed's table at the first caller count, `flatshare.colocation.seed_markdown`)
and `per-caller-table` (the main conditions' voice p95, turns over target and agent throughput at every
caller count).
"""

from __future__ import annotations

import re
from collections.abc import Callable

from flatshare.colocation.results import ColocationSummary, ConditionResult
from flatshare.colocation.seed_markdown import seed_counts_line, seed_table_lines

SUMMARY_PATH = "docs/results/colocation/summary.json"
PER_CALLER_CONDITIONS = (
    "alone",
    "vllm-fcfs",
    "vllm-priority",
    "make-room-preempt",
    "make-room-t16",
    "make-room-t48",
    "make-room-t48-decode",
    "vllm-priority-256",
    "make-room-t48-256",
    "make-room-t48-256-decode",
)


def seed_block(summary: ColocationSummary) -> list[str]:
    rows = summary.seed_comparison
    return [*seed_table_lines(rows), "", seed_counts_line(rows)]


def _p95(m: ConditionResult | None) -> tuple[str, str]:
    if m is None or m.voice_turn_p95_s is None:
        return "-", "-"
    ci = m.voice_turn_p95_ci
    shown = f"{m.voice_turn_p95_s:.2f} s" + ("" if ci is None else f" [{ci[0]:.2f}-{ci[1]:.2f}]")
    over = "-" if m.voice_over_target_frac is None else f"{m.voice_over_target_frac:.1%}"
    return shown, over


def per_caller_block(summary: ColocationSummary) -> list[str]:
    callers = summary.callers
    header = "| condition | " + " | ".join(f"{n} callers: p95 [95% CI] | over" for n in callers)
    header += " | agents vs `vllm-priority` (" + " / ".join(map(str, callers)) + ") |"
    lines = [header, "|---" * (2 + 2 * len(callers)) + "|"]
    for key in PER_CALLER_CONDITIONS:
        found = [summary.by_callers[n].conditions.get(key) for n in callers]
        if not any(found):
            continue
        cells = [cell for m in found for cell in _p95(m)]
        agents = [
            "-" if m is None or m.agent_throughput_ratio is None else f"{m.agent_throughput_ratio:.3f}"
            for m in found
        ]
        lines.append(f"| `{key}` | " + " | ".join(cells) + " | " + " / ".join(agents) + " |")
    return lines


BLOCKS: dict[str, Callable[[ColocationSummary], list[str]]] = {
    "seed-table": seed_block,
    "per-caller-table": per_caller_block,
}


def _keeping_markers(body: str) -> Callable[[re.Match[str]], str]:
    return lambda m: m.group(1) + body + m.group(2)


def render(text: str, summary: ColocationSummary) -> str:
    """`text` with every block of `BLOCKS` rewritten from `summary`; ValueError when a block's markers are
    missing or appear more than once."""
    for name, block in BLOCKS.items():
        pattern = re.compile(
            rf"(<!-- generated: {re.escape(name)} -->\n).*?(\n<!-- end generated: {re.escape(name)} -->)",
            re.DOTALL,
        )
        if len(pattern.findall(text)) != 1:
            raise ValueError(f"README: want one `<!-- generated: {name} -->` ... `<!-- end ... -->` block")
        body = "\n".join(block(summary))
        text = pattern.sub(_keeping_markers(body), text)
    return text
