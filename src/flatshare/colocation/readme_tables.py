"""The docs' co-location tables, generated from a `summary.json` so they cannot drift from it.

A page marks each generated block with a pair of comments, `<!-- generated: NAME -->` and
`<!-- end generated: NAME -->`; `render` rewrites what lies between them (`tools/readme_tables.py` writes
the pages, a test fails when a page differs from `render`'s output on the committed summary.json).
`PAGES` says which page holds which blocks: the README the headline (`headline-table`: stock vLLM and
make-room at the first caller count, with the p95 at the others), the co-location results page the
write-up's table (`seed-table`, `flatshare.colocation.seed_markdown`) and `per-caller-table` (the main
conditions' voice p95, turns over target and agent throughput at every caller count).
"""

from __future__ import annotations

import re
from collections.abc import Callable

from flatshare.colocation.results import ColocationSummary, ConditionResult
from flatshare.colocation.seed_markdown import seed_counts_line, seed_table_lines

SUMMARY_PATH = "docs/results/colocation/summary.json"
RESULTS_PAGE = "docs/results/colocation/README.md"
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
HEADLINE_CONDITIONS = {
    "alone": "voice alone (no agents)",
    "vllm-priority": "stock vLLM, priority scheduling",
    "make-room-preempt": "make-room, preemption only",
    "make-room-t48": "make-room, hold window T = 48",
    "make-room-t48-256-decode": "make-room T = 48, decode hold, 256-token steps",
}


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


def _agents(m: ConditionResult | None) -> str:
    return "-" if m is None or m.agent_throughput_ratio is None else f"{m.agent_throughput_ratio:.3f}"


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
        agents = [_agents(m) for m in found]
        lines.append(f"| `{key}` | " + " | ".join(cells) + " | " + " / ".join(agents) + " |")
    return lines


def headline_block(summary: ColocationSummary) -> list[str]:
    """The headline conditions at the first caller count: voice turn p95 with its interval, the share of
    turns over the target, the agents' token rate against stock vLLM, and the p95 at the other counts."""
    first, *others = summary.callers
    at_first = summary.by_callers[first]
    header = (
        f"| condition | voice turn p95 [95% CI], {first} callers | turns over {at_first.target_s:.2f} s "
        "| agents' tokens vs stock |"
    )
    if others:
        header += " p95 at " + " / ".join(map(str, others)) + " callers |"
    lines = [header, "|---" * (4 + bool(others)) + "|"]
    for key, label in HEADLINE_CONDITIONS.items():
        m = at_first.conditions.get(key)
        if m is None:
            continue
        p95, over = _p95(m)
        row = f"| {label} (`{key}`) | {p95} | {over} | {_agents(m)} |"
        if others:
            later = [summary.by_callers[n].conditions.get(key) for n in others]
            row += (
                " "
                + " / ".join(
                    "-" if x is None or x.voice_turn_p95_s is None else f"{x.voice_turn_p95_s:.2f} s"
                    for x in later
                )
                + " |"
            )
        lines.append(row)
    return lines


BLOCKS: dict[str, Callable[[ColocationSummary], list[str]]] = {
    "headline-table": headline_block,
    "seed-table": seed_block,
    "per-caller-table": per_caller_block,
}
PAGES: dict[str, tuple[str, ...]] = {
    "README.md": ("headline-table",),
    RESULTS_PAGE: ("seed-table", "per-caller-table"),
}


def _keeping_markers(body: str) -> Callable[[re.Match[str]], str]:
    return lambda m: m.group(1) + body + m.group(2)


def render(text: str, summary: ColocationSummary, names: tuple[str, ...]) -> str:
    """`text` with each block of `names` rewritten from `summary`; ValueError when a block's markers are
    missing or appear more than once."""
    for name in names:
        pattern = re.compile(
            rf"(<!-- generated: {re.escape(name)} -->\n).*?(\n<!-- end generated: {re.escape(name)} -->)",
            re.DOTALL,
        )
        if len(pattern.findall(text)) != 1:
            raise ValueError(f"want one `<!-- generated: {name} -->` ... `<!-- end ... -->` block")
        body = "\n".join(BLOCKS[name](summary))
        text = pattern.sub(_keeping_markers(body), text)
    return text
