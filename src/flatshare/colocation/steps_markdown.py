"""Where the simulated engine's time went, per condition (`ConditionResult.step_ledger`), as report.md's
tables: one per caller count, make-room's variants and the agents-only reference beside stock
(`vllm-priority`), each with its step count, its busy time in the step model's parts, and the per-step
floor it paid above stock's (`floor_s`: its steps at the cost of a one-token step) as a share of stock's
busy time, beside what the agents lost.

The reading it supports (docs/make-room.md, "Where the agents' share goes"): with the engine busy the
whole window, a variant that holds agent prefill out of the voice reply's decode steps runs more, smaller
steps for the same work, and every step pays the floor wherever it runs.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from flatshare.colocation.goal import STOCK
from flatshare.colocation.results import ColocationSummary, ConditionResult
from flatshare.policy.classes import DEFAULT_PRIORITY
from flatshare.sim.step_ledger import work_key

HEADER = (
    "| condition | steps | decode-only steps | fixed s | linear s | attention s | busy s | per-step floor s "
    "above stock (share of stock's busy time) | agents' work s | agents' work per 1k of their tokens, s "
    "(vs stock) | agents' rate vs stock |"
)
AGENT_WORK = work_key(DEFAULT_PRIORITY["agent"])
AGENTS_ALONE = "agents-alone"


def _num(ledger: Mapping[str, float | None], key: str) -> float:
    value = ledger.get(key)
    return 0.0 if value is None else float(value)


def extra_floor(m: ConditionResult, stock: ConditionResult) -> tuple[float, float] | None:
    """The per-step floor seconds `m` paid above `stock` and their share of stock's busy time (None when
    either lacks a ledger)."""
    if not m.step_ledger or not stock.step_ledger or not _num(stock.step_ledger, "busy_s"):
        return None
    extra = _num(m.step_ledger, "floor_s") - _num(stock.step_ledger, "floor_s")
    return extra, extra / _num(stock.step_ledger, "busy_s")


def work_per_k_tokens(m: ConditionResult) -> float | None:
    """The agents' work (`AGENT_WORK`: their share of the passes, the fixed cost left out) per 1,000 of
    their output tokens in the window."""
    window, work = _num(m.step_ledger, "window_s"), m.step_ledger.get(AGENT_WORK)
    if not window or work is None or not m.agent_tokens_per_s:
        return None
    return float(work) / (m.agent_tokens_per_s * window / 1000)


def _row(key: str, m: ConditionResult, stock: ConditionResult) -> str:
    led = m.step_ledger
    extra = extra_floor(m, stock)
    above = "-" if extra is None or key == STOCK else f"{extra[0]:+.1f} ({extra[1] * 100:+.1f}%)"
    rate = "-" if m.agent_throughput_ratio is None else f"{m.agent_throughput_ratio:.3f}"
    attention = _num(led, "prefill_attention_s") + _num(led, "decode_attention_s")
    per_k, stock_per_k = work_per_k_tokens(m), work_per_k_tokens(stock)
    per_k_cell = "-" if per_k is None else f"{per_k:.2f}"
    if per_k is not None and stock_per_k and key != STOCK:
        per_k_cell += f" ({per_k / stock_per_k - 1:+.1%})"
    work = led.get(AGENT_WORK)
    cells = [
        f"`{key}`",
        f"{_num(led, 'steps'):.0f}",
        f"{_num(led, 'decode_only_steps'):.0f}",
        f"{_num(led, 'fixed_s'):.1f}",
        f"{_num(led, 'linear_s'):.1f}",
        f"{attention:.1f}",
        f"{_num(led, 'busy_s'):.1f}",
        above,
        "-" if work is None else f"{work:.1f}",
        per_k_cell,
        rate,
    ]
    return "| " + " | ".join(cells) + " |"


def shown(conditions: Mapping[str, ConditionResult], has: Callable[[ConditionResult], object]) -> list[str]:
    """Stock first, make-room's variants by name, then `agents-alone`: those for which `has` (their
    ledger) is true. The rows of this module's tables and of `kv_markdown`'s."""
    keys = [k for k, m in conditions.items() if has(m)]
    keys = [k for k in keys if k in (STOCK, AGENTS_ALONE) or k.startswith("make-room")]
    return sorted(keys, key=lambda k: (k != STOCK, k == AGENTS_ALONE, k))


def steps_lines(summary: ColocationSummary) -> list[str]:
    """The section (none when the runs hold no stock ledger: real engines, or runs saved before it)."""
    lines: list[str] = []
    for callers in summary.callers:
        conditions = summary.by_callers[callers].conditions
        stock = conditions.get(STOCK)
        if stock is None or not stock.step_ledger:
            continue
        rows = [_row(k, conditions[k], stock) for k in shown(conditions, lambda m: m.step_ledger)]
        lines += [f"### {callers} callers", "", HEADER, "|---" * 11 + "|", *rows, ""]
    if not lines:
        return []
    intro = (
        "Mean per run over the run's duration (the drain left out), from the simulated engine's step "
        "ledger (`flatshare.sim.step_ledger`): its steps, those that carried no prefill token (make-room's "
        "held steps are of this kind), and its busy seconds in the step model's parts. Every step costs at "
        "least the floor (a one-token step: the fixed cost, and under the roofline model the weights read "
        "once) whatever it carries: a variant that keeps agent prefill out of the voice reply's steps runs "
        "more steps for the same work, and the floor seconds above stock's are time the agents no longer "
        "get. The agents' work is the passes' time spent on their requests, the fixed cost left out (each "
        "request's attention, and the pass's linear work by tokens: under the roofline model that includes "
        "a share of the weights' read); per 1,000 of their output tokens it rises when they redo work (a "
        "preempted request recomputed, a prefix evicted and prefilled again) or run in smaller passes."
    )
    return ["## Where the engine's time went", "", intro, "", *lines]
