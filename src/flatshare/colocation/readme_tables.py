"""The docs' co-location tables, generated from a `summary.json` so they cannot drift from it.

A page marks each generated block with a pair of comments, `<!-- generated: NAME -->` and
`<!-- end generated: NAME -->`; `render` rewrites what lies between them (`tools/readme_tables.py` writes
the pages, a test fails when a page differs from `render`'s output on the committed summary.json).
`PAGES` says which page holds which blocks: the README the headline (`headline-table`: stock vLLM and
make-room at the first caller count, with the p95 at the others, beside the write-up's own figures), the
co-location results page the
write-up's table (`seed-table`, `flatshare.colocation.seed_markdown`) and `per-caller-table` (the main
conditions' voice p95, turns over target and agent throughput at every caller count).

The headline's best make-room configuration comes from the mechanisms' full run
(`MECHANISMS_SUMMARY_PATH`), which ran the same preset, random seeds and durations as the main one:
`docs_summary` adds the conditions the main run lacks, and refuses runs whose setup or stock figures differ.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from pathlib import Path

from flatshare.colocation.goal import STOCK
from flatshare.colocation.results import CallerResult, ColocationSummary, ConditionResult
from flatshare.colocation.seed_markdown import seed_counts_line, seed_table_lines, shown
from flatshare.colocation.seed_table import SEED_ROW_BY_NAME
from flatshare.colocation.setup import SEED

SUMMARY_PATH = "docs/results/colocation/summary.json"
MECHANISMS_SUMMARY_PATH = "docs/results/mechanisms/llama3-8b-24gb/summary.json"
BEST = "make-room-t48-syncload-tierkeep-tail-hint-sentence-hintdue-keepvictims-hintride-syncvictims"
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
    BEST: "make-room T = 48 ending at the first sentence, protected KV loaded in the step and kept in the "
    "CPU tier, small tails recomputed, arrival hints that say when the turn is due, preempted agents held "
    "in the CPU tier and loaded back inside the step that admits them again, agent prefill riding in the "
    "steps held before the turn",
}
# The write-up's own figures for a headline row (`flatshare.colocation.seed_table`), by condition.
WRITE_UP_ROWS = {
    "alone": ("voice alone: turn p95 s",),
    "vllm-priority": ("stock vLLM (priority): voice turn p95 s", "stock vLLM: turns over target"),
    "make-room-preempt": ("preemption only: voice turn p95 s",),
    "make-room-t48": (
        "make-room T=48: voice turn p95 s",
        "make-room T=48: turns over target",
        "make-room T=48: agent throughput vs stock",
    ),
    "make-room-t48-256-decode": (
        "every fix (T=48, decode hold, 256-token steps), 2, 4 and 6 callers: turns over target",
    ),
}


def write_up_cell(key: str) -> str:
    """The write-up's figures for condition `key` as the headline shows them ("-": it has none)."""
    parts = []
    for name in WRITE_UP_ROWS.get(key, ()):
        row = SEED_ROW_BY_NAME[name]
        figure = row.said or shown(row.seed, row.fmt) + (" s" if name.endswith(" s") else "")
        what = "over target" if "over target" in name else "agents" if "agent" in name else "p95"
        pooled = " (2-6 callers)" if "2, 4 and 6 callers" in name else ""
        parts.append((f"{what} {figure}" if what != "p95" else figure) + pooled)
    return ", ".join(parts) or "-"


def load_docs_summary(root: Path) -> ColocationSummary:
    """The summary the docs' tables are generated from: the main full run's, with the mechanisms' run's
    conditions added (`docs_summary`), both read from the checkout at `root`."""
    from flatshare.colocation.summary import load_summary

    return docs_summary(load_summary(root / SUMMARY_PATH), load_summary(root / MECHANISMS_SUMMARY_PATH))


def _stock_figures(block: CallerResult) -> tuple[object, ...]:
    m = block.conditions.get(STOCK)
    return (
        () if m is None else (m.n_voice_turns, m.voice_turn_p95_s, m.voice_turn_p50_s, m.agent_tokens_per_s)
    )


def docs_summary(main: ColocationSummary, mechanisms: ColocationSummary) -> ColocationSummary:
    """`main` with, at each caller count, the conditions of `mechanisms` it lacks; ValueError when the two
    runs' setups, caller counts or stock (`vllm-priority`) figures differ, so rows from the two sit side by
    side only when they measure the same thing."""
    preset = SEED.to_json()  # a setting saved before it existed had the preset's value
    same_setup = {**preset, **(main.setup or {})} == {**preset, **(mechanisms.setup or {})}
    if not same_setup or main.callers != mechanisms.callers:
        raise ValueError("the mechanisms' run must have the main run's setup and caller counts")
    blocks = {}
    for n in main.callers:
        mine, theirs = main.by_callers[n], mechanisms.by_callers[n]
        if _stock_figures(mine) != _stock_figures(theirs):
            raise ValueError(f"{n} callers: the two runs' `vllm-priority` figures differ")
        added = {k: m for k, m in theirs.conditions.items() if k not in mine.conditions}
        blocks[n] = CallerResult(mine.target_s, {**mine.conditions, **added})
    return dataclasses.replace(main, by_callers=blocks)


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
    turns over the target, the agents' token rate against stock vLLM, the p95 and the agents' rate at the
    other counts, and the write-up's own figures (`WRITE_UP_ROWS`)."""
    first, *others = summary.callers
    at_first = summary.by_callers[first]
    header = (
        f"| condition | voice turn p95 [95% CI], {first} callers | turns over {at_first.target_s:.2f} s "
        "| agents' tokens vs stock |"
    )
    if others:
        header += " p95, agents at " + " / ".join(map(str, others)) + " callers |"
    header += " the write-up |"
    lines = [header, "|---" * (5 + bool(others)) + "|"]
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
                    "-"
                    if x is None or x.voice_turn_p95_s is None
                    else f"{x.voice_turn_p95_s:.2f} s, {_agents(x)}"
                    for x in later
                )
                + " |"
            )
        lines.append(row + f" {write_up_cell(key)} |")
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
