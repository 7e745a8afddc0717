"""The frontier figure (`frontier.png`): the agents' token rate against the voice turns over target, one
point per condition, one panel per caller count, the goal's region shaded (`flatshare.colocation.goal`).

x: agents' token rate / `vllm-priority`'s; y: voice turns over target (%). Each point is labelled with its
condition and its agents' slowest first-token wait as a multiple of stock's, so a variant cannot hide
starving an agent. `alone` is a dotted line at its share (it has no agents), stock (`vllm-priority`) a star.
The write-up's published points (`PUBLISHED`, read from the seed table's figures) are black crosses where
it gives both coordinates for a caller count, and a dashed line at its share where it gives no agent rate.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.axes import Axes

from flatshare.colocation.goal import ALONE, GOAL, STOCK, Goal, agent_wait_ratio, over_target_limit
from flatshare.colocation.results import CallerResult, ColocationSummary
from flatshare.colocation.seed_table import SEED_ROW_BY_NAME
from flatshare.safeout import save_figure


@dataclass(frozen=True)
class PublishedPoint:
    """A point of the write-up: its share of turns over target and the agents' rate vs stock (None: the
    write-up gives none) at `callers` (a figure pooled over several caller counts names them all)."""

    label: str
    callers: tuple[int, ...]
    over_target: float
    agent_rate: float | None


def _seed(row: str) -> float:
    return SEED_ROW_BY_NAME[row].seed


PUBLISHED = (
    PublishedPoint("write-up: stock vLLM", (2,), _seed("stock vLLM: turns over target"), 1.0),
    PublishedPoint(
        "write-up: make-room T=48",
        (2,),
        _seed("make-room T=48: turns over target"),
        _seed("make-room T=48: agent throughput vs stock"),
    ),
    PublishedPoint(
        "write-up: every fix (2, 4, 6 callers pooled; no agent rate given)",
        (2, 4, 6),
        _seed("every fix (T=48, decode hold, 256-token steps), 2, 4 and 6 callers: turns over target"),
        None,
    ),
)
CAPTION = (
    "x: agents' token rate / `vllm-priority`'s; y: voice turns over target (%, linear up to 5%, logarithmic above); one point per condition "
    "(blue: make-room variants, grey: baselines, red star: stock `vllm-priority`), each labelled with its "
    "agents' slowest first-token wait as a multiple of stock's. Green: the goal (x >= 0.97, y <= `alone` + "
    "1 point); dotted: `alone`. Black crosses: the write-up's published points (2 callers); the dashed "
    "line is the write-up's every-fix share (16 of 720 turns, pooled over 2, 4 and 6 callers), a line "
    "because the write-up gives no agent rate for it."
)
_NOT_A_POINT = (ALONE, "agents-alone")
Y_TICKS = (0, 1, 2, 3, 5, 10, 20, 50, 100)


@dataclass(frozen=True)
class FrontierPoint:
    condition: str
    agent_rate: float
    over_target: float
    agent_wait: float | None


def frontier_points(block: CallerResult) -> list[FrontierPoint]:
    """Every condition with voice turns, agents and both coordinates, in key order."""
    out = []
    for key, m in sorted(block.conditions.items()):
        x, y = m.agent_throughput_ratio, m.voice_over_target_frac
        if key in _NOT_A_POINT or not m.n_voice_turns or x is None or y is None:
            continue
        out.append(FrontierPoint(key, x, y, agent_wait_ratio(m, block)))
    return out


def _style(key: str) -> tuple[str, str, float]:
    if key == STOCK:
        return "*", "#c44e52", 140.0
    return ("o", "#4c72b0", 30.0) if key.startswith("make-room") else ("s", "#8c8c8c", 30.0)


def _panel(ax: Axes, callers: int, block: CallerResult, goal: Goal) -> None:
    points = frontier_points(block)
    labels: dict[tuple[float, float], list[str]] = {}
    for p in points:
        marker, color, size = _style(p.condition)
        ax.scatter(p.agent_rate, 100 * p.over_target, marker=marker, color=color, s=size, zorder=3)
        wait = "-" if p.agent_wait is None else f"{p.agent_wait:.2f}x"
        labels.setdefault((p.agent_rate, 100 * p.over_target), []).append(f"{p.condition} ({wait})")
    for xy, names in labels.items():  # conditions on the same spot share one label
        ax.annotate("\n".join(names), xy, fontsize=5.5, xytext=(3, 2), textcoords="offset points")
    published = [q for q in PUBLISHED if callers in q.callers]
    for q in published:
        if q.agent_rate is None:
            ax.axhline(100 * q.over_target, color="black", linestyle="--", lw=0.8, label=q.label)
        else:
            xy = (q.agent_rate, 100 * q.over_target)
            ax.scatter(*xy, marker="x", color="black", s=40, label=q.label)
            ax.annotate(q.label, xy, fontsize=5.5, style="italic", xytext=(3, -8), textcoords="offset points")
    xs = [p.agent_rate for p in points] + [q.agent_rate for q in published if q.agent_rate is not None]
    low, high = min([goal.agent_rate - 0.03, *xs]) - 0.01, max([1.02, *xs]) + 0.01
    ax.set_xlim(low, high)
    limit = over_target_limit(block, goal)
    if limit is not None:
        ax.axhline(100 * (limit - goal.over_target_points), color="#55a868", linestyle=":", label=ALONE)
        ax.fill_between([goal.agent_rate, high], 0, 100 * limit, color="#55a868", alpha=0.2, label="goal")
    ax.set_yscale("symlog", linthresh=5, linscale=1.5)  # linear up to 5%, so the goal's band shows
    ax.set_ylim(0, 100)
    ax.set_yticks(Y_TICKS, [f"{t:g}" for t in Y_TICKS])
    if not points:
        missing = STOCK if STOCK not in block.conditions else f"{ALONE} (no target)"
        ax.text(0.5, 0.5, f"no points: no {missing} in these runs", ha="center", transform=ax.transAxes)
    ax.set_xlabel(f"agents' token rate / {STOCK}'s")
    ax.set_ylabel("voice turns over target (%)")
    ax.set_title(f"{callers} callers (label: agents' slowest first token vs stock)", fontsize=9)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=6, loc="upper center", bbox_to_anchor=(0.5, -0.13), ncol=2)


def frontier_figure(summary: ColocationSummary, path: Path, goal: Goal = GOAL) -> None:
    """Write `path` (PNG): one panel per caller count of `summary`."""
    n = len(summary.callers)
    fig, axes = plt.subplots(1, n, figsize=(8 * n, 7), squeeze=False)
    for ax, callers in zip(axes[0], summary.callers, strict=True):
        _panel(ax, callers, summary.by_callers[callers], goal)
    fig.tight_layout()
    save_figure(fig, path, dpi=120)
    plt.close(fig)
