"""make-room's ablation (`flatshare.colocation.ablation`) as markdown tables for report.md, one per caller
count: each variant's figures with what it changed over the variant below it, and a yes/no column per
criterion of the goal (`flatshare.colocation.goal`; `-` where the runs cannot judge it)."""

from __future__ import annotations

from flatshare.colocation.goal import GOAL, Goal
from flatshare.colocation.results import AblationRow


def how_to_read(goal: Goal = GOAL) -> str:
    return (
        "Each make-room variant beside the variant below it (`flatshare.colocation.ablation.EDGES`; a "
        "variant whose parent these runs lack is compared with the nearest ancestor they hold), with what "
        "it changed in parentheses (turns over target in points, p95 in seconds, agents' rate as a "
        "fraction). The goal, one column per criterion: turns over target at most "
        f"{goal.over_target_points * 100:g} point above `alone`'s, turn p95 within the target, agents at "
        f">= {goal.agent_rate:.0%} of `vllm-priority`'s token rate, and their slowest first-token wait at "
        f"most {goal.agent_wait_factor:g}x stock's (`-`: these runs cannot judge it)."
    )


HEADER = (
    "| variant | below it | adds | turns over target [95% CI, calls resampled] | turn p95 s | agents' rate "
    "vs priority | agents' slowest first token vs stock | over target ok | p95 ok | agents' rate ok | "
    "agents' wait ok | meets the goal |"
)


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:.1f}%"


def _change(delta: float | None, fmt: str, unit: str = "") -> str:
    return "" if delta is None else f" ({delta:+{fmt}}{unit})"


def _yes(verdict: bool | None) -> str:
    return "-" if verdict is None else "yes" if verdict else "**no**"


def _row(r: AblationRow) -> str:
    over = _pct(r.over_target)
    if r.over_target_ci is not None:
        over += f" [{r.over_target_ci[0] * 100:.1f}-{r.over_target_ci[1] * 100:.1f}]"
    if r.over_target_delta is not None:
        over += f" ({r.over_target_delta * 100:+.1f} pt)"
    p95 = "-" if r.turn_p95_s is None else f"{r.turn_p95_s:.2f}" + _change(r.turn_p95_delta_s, ".2f")
    rate = "-" if r.agent_rate is None else f"{r.agent_rate:.3f}" + _change(r.agent_rate_delta, ".3f")
    wait = "-" if r.agent_wait is None else f"{r.agent_wait:.2f}x"
    verdicts = (r.meets_over_target, r.meets_p95, r.meets_agent_rate, r.meets_agent_wait, r.meets_goal)
    cells = [f"`{r.condition}`", f"`{r.below}`" if r.below else "-", r.adds or "-", over, p95, rate, wait]
    return "| " + " | ".join([*cells, *(_yes(v) for v in verdicts)]) + " |"


def ablation_lines(rows: tuple[AblationRow, ...], callers: int) -> list[str]:
    """The table of `rows` at `callers` (none when the runs hold no variant there)."""
    mine = [r for r in rows if r.callers == callers]
    if not mine:
        return []
    return [HEADER, "|---" * HEADER.count(" | ") + "|---|", *(_row(r) for r in mine)]
