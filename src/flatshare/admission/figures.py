"""Figures of an admission experiment (matplotlib, PNG), drawn from the summary and saved runs."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

from flatshare.admission.attribution import PressureEvent
from flatshare.admission.results import AdmissionSummary, ConditionResult
from flatshare.admission.runs import SavedRun
from flatshare.safeout import save_figure


def _bars(ax: Any, conditions: Mapping[str, ConditionResult], keys: list[str], title: str) -> None:
    values = [conditions[k].short_ttft_p95_s or 0.0 for k in keys]
    cis = [conditions[k].short_ttft_p95_ci or (v, v) for k, v in zip(keys, values, strict=True)]
    err = np.array(
        [
            [max(0.0, v - (lo or 0.0)) for v, (lo, _) in zip(values, cis, strict=True)],
            [max(0.0, (hi or 0.0) - v) for v, (_, hi) in zip(values, cis, strict=True)],
        ]
    )
    ax.bar(range(len(keys)), values, yerr=err, capsize=3, color="#4c72b0")
    for i, k in enumerate(keys):
        dots = [x for x in conditions[k].per_seed_short_ttft_p95_s if x is not None]
        if len(dots) > 1:
            ax.scatter([i] * len(dots), dots, s=8, color="#dd8452", zorder=3)
    ax.set_xticks(range(len(keys)), keys, rotation=40, ha="right", fontsize=7)
    ax.set_title(title, fontsize=9)
    ax.set_ylabel("short TTFT p95 (s)")


def synthetic_figure(summary: AdmissionSummary, path: Path) -> None:
    """Mean p95 TTFT of the shorts per condition with its 95% CI (bars) and per-seed p95s (dots)."""
    names = [n for n in ("synthetic", "synthetic-long-first") if n in summary.workloads]
    fig, axes = plt.subplots(1, max(1, len(names)), figsize=(5.5 * max(1, len(names)), 4.2), squeeze=False)
    for ax, name in zip(axes[0], names, strict=False):
        conditions = summary.workloads[name].conditions
        _bars(ax, conditions, list(conditions), name)
    fig.tight_layout()
    save_figure(fig, path, dpi=110)
    plt.close(fig)


def traces_figure(summary: AdmissionSummary, path: Path) -> None:
    """p95 TTFT of short requests per condition, one panel per trace and engine count."""
    names = [n for n, w in summary.workloads.items() if w.part == "trace"]
    if not names:
        return
    cols = min(3, len(names))
    rows = -(-len(names) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.6 * cols, 3.8 * rows), squeeze=False)
    for ax, name in zip(axes.flat, names, strict=False):
        conditions = summary.workloads[name].conditions
        _bars(ax, conditions, list(conditions), name)
    for ax in list(axes.flat)[len(names) :]:
        ax.axis("off")
    fig.tight_layout()
    save_figure(fig, path, dpi=110)
    plt.close(fig)


def levers_figure(summary: AdmissionSummary, path: Path) -> None:
    """The 2x2 of routing and make-room per synthetic workload: short p95 and the long request's TTFT."""
    levers = summary.levers
    if not levers:
        return
    cells = list(next(iter(levers.values())))
    width = 0.8 / len(levers)
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    panels = ((axes[0], "short_ttft_p95_s", "short TTFT p95 (s)"), (axes[1], "long_ttft_s", "long TTFT (s)"))
    for ax, field, label in panels:
        for i, (name, block) in enumerate(levers.items()):
            x = np.arange(len(cells)) + i * width
            ax.bar(x, [getattr(block[c], field) or 0.0 for c in cells], width, label=name)
        ax.set_xticks(np.arange(len(cells)) + 0.4 - width / 2, cells, rotation=20, ha="right", fontsize=7)
        ax.set_ylabel(label)
        ax.legend(fontsize=7)
    fig.tight_layout()
    save_figure(fig, path, dpi=110)
    plt.close(fig)


Panel = tuple[str, SavedRun, list[PressureEvent], tuple[float, float] | None]


def attribution_figure(panels: list[Panel], path: Path) -> None:
    """Per run and engine: KV use over time, the KV held by the responsible requests, pressure events
    (shaded), slowed shorts (their send-to-first-token lines) and routing decisions that moved a request
    (triangles at the decision time on the engine it left)."""
    rows = [(p, engine) for p in panels for engine in _engines(p[1])]
    if not rows:
        return
    fig, axes = plt.subplots(len(rows), 1, figsize=(10, 2.1 * len(rows)), squeeze=False)
    for ax, ((title, run, events, xlim), engine) in zip(axes[:, 0], rows, strict=True):
        occ = sorted((r for r in run.occupancy if r["engine"] == engine), key=lambda r: r["t"])
        kv_tokens = int(run.facts["engine_config"]["kv_tokens"])
        t = [r["t"] for r in occ]
        ax.step(t, [r["kv_usage"] for r in occ], where="post", color="#4c72b0", lw=1, label="KV use")
        lo, hi = xlim if xlim is not None else (float("-inf"), float("inf"))
        shown = [e for e in events if e.engine == engine and e.end_s >= lo and e.start_s <= hi]
        ranked = sorted(((x, r) for e in shown for r, x in e.responsible), reverse=True)
        culprits = list(dict.fromkeys(r for _, r in ranked))[:3]
        for rid in culprits:
            ax.step(
                t,
                [r["held"].get(rid, 0) / kv_tokens for r in occ],
                where="post",
                lw=1,
                label=f"{rid} KV share",
            )
        for e in shown:
            ax.axvspan(e.start_s, e.end_s, color="#c44e52", alpha=0.15)
            for s in e.shorts:
                ax.plot([s.send_s, s.first_token_s], [0.0, 0.0], color="#c44e52", lw=2, alpha=0.6)
        moved = [d for d in run.decisions if d.moved and d.preferred == engine]
        ax.scatter(
            [d.t for d in moved], [0.0] * len(moved), marker="v", color="black", zorder=4, label="moved away"
        )
        if xlim is not None:
            ax.set_xlim(*xlim)
        ax.set_title(f"{title}: {engine}", fontsize=8)
        ax.set_ylabel("KV share", fontsize=8)
        ax.legend(fontsize=6, loc="upper right")
    axes[-1, 0].set_xlabel("time (s)")
    fig.tight_layout()
    save_figure(fig, path, dpi=110)
    plt.close(fig)


def _engines(run: SavedRun) -> list[str]:
    return sorted({r["engine"] for r in run.occupancy})
