"""Figures of a co-location experiment (matplotlib, PNG), drawn from the summary and saved runs."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

from flatshare.colocation.readme_tables import PER_CALLER_CONDITIONS
from flatshare.colocation.results import ColocationSummary, ConditionResult
from flatshare.colocation.runs import SavedRun
from flatshare.listen.voice import VoicePipeline
from flatshare.safeout import save_figure
from flatshare.sim.waits import WAIT_PARTS

MAIN_ORDER = (
    *PER_CALLER_CONDITIONS,  # stock vLLM and make-room, as the README's per-caller table lists them
    "leaseholder",
    "agent-cap",
    "flow-control",
    "sglang-preempt",
    "reserve-voice",
    "abort-resubmit",
)
SWEEP: tuple[tuple[int, str], ...] = (
    (0, "make-room-preempt"),
    *tuple((t, f"make-room-t{t}") for t in (8, 16, 24, 32, 48, 64)),
)


def _present(conditions: Mapping[str, ConditionResult]) -> list[str]:
    return [key for key in MAIN_ORDER if key in conditions]


def tail_figure(summary: ColocationSummary, path: Path) -> None:
    """p95 turn latency per condition with its CI and the target, one panel per caller count."""
    by_callers = summary.by_callers
    fig, axes = plt.subplots(1, len(by_callers), figsize=(5 * len(by_callers), 4.2), squeeze=False)
    for ax, (callers, block) in zip(axes[0], by_callers.items(), strict=True):
        keys = _present(block.conditions)
        p95 = [block.conditions[k].voice_turn_p95_s or 0.0 for k in keys]
        ci = [block.conditions[k].voice_turn_p95_ci or (v, v) for k, v in zip(keys, p95, strict=True)]
        err = np.array(
            [
                [v - (lo or v) for v, (lo, _) in zip(p95, ci, strict=True)],
                [(hi or v) - v for v, (_, hi) in zip(p95, ci, strict=True)],
            ]
        )
        ax.bar(range(len(keys)), p95, yerr=err, capsize=3, color="#4c72b0")
        target = block.target_s or 0.0
        ax.axhline(target, color="#c44e52", linestyle="--", label=f"target {target:.2f} s")
        ax.set_xticks(range(len(keys)), keys, rotation=60, ha="right", fontsize=8)
        ax.set_ylabel("voice turn p95 (s)")
        ax.set_title(f"{callers} callers")
        ax.legend(fontsize=8)
    fig.tight_layout()
    save_figure(fig, path, dpi=110)
    plt.close(fig)


def sweep_figure(summary: ColocationSummary, path: Path) -> None:
    """p95 time to the n-th token of a reply for each window T, and at n = 16, 24, 40 against T."""
    conditions = summary.conditions
    points = [(t, conditions[key].nth_token_p95_s) for t, key in SWEEP if key in conditions]
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    for t, series in points:
        xs = [n for n, v in enumerate(series, start=1) if v is not None]
        left.plot(xs, [v for v in series if v is not None], label=f"T={t}")
    left.set_xlabel("n-th output token")
    left.set_ylabel("p95 time from send (s)")
    for n in (16, 24, 40):
        at_n = [(t, v) for t, s in points if (v := s[n - 1]) is not None]
        right.plot([t for t, _ in at_n], [v for _, v in at_n], marker="o", label=f"token {n}")
    right.set_xlabel("window T (tokens)")
    right.set_ylabel("p95 time to the n-th token (s)")
    if points:
        left.legend(fontsize=8)
        right.legend(fontsize=8)
    else:
        for ax in (left, right):
            ax.text(0.5, 0.5, "no make-room window T in this plan", ha="center", transform=ax.transAxes)
    fig.tight_layout()
    save_figure(fig, path, dpi=110)
    plt.close(fig)


def stages_figure(summary: ColocationSummary, path: Path) -> None:
    """Mean engine stages of a voice turn per condition: the wait for the first token split by part
    (`flatshare.sim.waits`), then decoding the first sentence (the first seed's Figure 02, extended)."""
    conditions = summary.conditions
    keys = _present(conditions)
    fig, ax = plt.subplots(figsize=(9, 4.5))
    bottom = np.zeros(len(keys))
    colors = plt.get_cmap("tab10")
    for i, part in enumerate((*WAIT_PARTS, "first_sentence")):
        if part == "first_sentence":
            values = np.array([conditions[k].stage_first_sentence_mean_s or 0.0 for k in keys])
        else:
            values = np.array([(conditions[k].voice_wait_parts_mean_s or {}).get(part) or 0.0 for k in keys])
        if not values.any():
            continue
        label = "decoding the first sentence" if part == "first_sentence" else f"first token: {part}"
        ax.bar(range(len(keys)), values, bottom=bottom, label=label, color=colors(i % 10))
        bottom += values
    ax.set_xticks(range(len(keys)), keys, rotation=60, ha="right", fontsize=8)
    ax.set_ylabel("seconds (mean over voice turns)")
    if ax.get_legend_handles_labels()[0]:  # runs without stage timings draw no bar
        ax.legend(fontsize=7)
    fig.tight_layout()
    save_figure(fig, path, dpi=110)
    plt.close(fig)


def cdf_figure(runs: list[SavedRun], summary: ColocationSummary, pipeline: VoicePipeline, path: Path) -> None:
    callers = summary.callers[0]
    fig, ax = plt.subplots(figsize=(7, 4))
    for key in _present(summary.conditions):
        turns = sorted(
            pipeline.turn_latency(r)
            for run in runs
            if run.condition == key and run.callers == callers
            for r in run.records
            if r.cls == "voice"
        )
        if turns:
            ax.plot(turns, np.arange(1, len(turns) + 1) / len(turns), label=key)
    ax.axvline(summary.target_s or 0.0, color="#c44e52", linestyle="--")
    ax.set_xscale("log")
    ax.set_xlabel("voice turn latency (s)")
    ax.set_ylabel("fraction of turns")
    ax.legend(fontsize=7)
    fig.tight_layout()
    save_figure(fig, path, dpi=110)
    plt.close(fig)


def kv_figure(runs: list[SavedRun], summary: ColocationSummary, path: Path, window_tokens: int = 48) -> None:
    """KV use over time, preemptions marked, protected reply windows shaded (first run of each): stock
    priority and make-room T=48, or, in an experiment of neither, its first two conditions (a panel
    saying so when no run is there)."""
    callers = summary.callers[0]
    shown = [k for k in ("vllm-priority", "make-room-t48") if k in summary.conditions]
    shown = (
        shown
        or [k for k in summary.conditions if any(r.condition == k and r.callers == callers for r in runs)][:2]
    )
    rows = max(len(shown), 1)
    fig, axes = plt.subplots(rows, 1, figsize=(10, 2.6 * rows), squeeze=False, sharex=True)
    if not shown:
        axes[0, 0].text(0.5, 0.5, "no run to show in this plan", ha="center")
        axes[0, 0].set_axis_off()
    for ax, key in zip(axes[:, 0], shown, strict=False):
        run = min((r for r in runs if r.condition == key and r.callers == callers), key=lambda r: r.seed)
        t = [s["t"] for s in run.samples]
        ax.plot(t, [s["kv_usage"] for s in run.samples], lw=0.8)
        pre = [
            b["t"]
            for a, b in zip(run.samples, run.samples[1:], strict=False)
            if b["preemptions_total"] > a["preemptions_total"]
        ]
        ax.vlines(pre, 0, 1.05, color="#c44e52", lw=0.8, label="preemption")
        for r in run.records:
            if r.cls == "voice" and r.token_times_s:
                end = r.token_times_s[min(window_tokens, len(r.token_times_s)) - 1]
                ax.axvspan(r.send_s, end, color="#55a868", alpha=0.25, lw=0)
        ax.set_ylim(0, 1.05)
        ax.set_ylabel("KV use")
        ax.set_title(
            f"{key}, {callers} callers, seed {run.seed} (green: voice replies' first {window_tokens} tokens)",
            fontsize=9,
        )
    axes[-1, 0].set_xlabel("virtual seconds")
    fig.tight_layout()
    save_figure(fig, path, dpi=110)
    plt.close(fig)
