"""`call.png`: the lanes of a rendered call on one time axis, speech and silence, each wait labelled."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.patches import Patch

from flatshare.listen.timeline import CallTimeline
from flatshare.safeout import save_figure

COLORS = {"caller": "#8c8c8c", "wait": "#c44e52", "reply": "#4c72b0", "hold": "#e8a5a7"}
LEGEND = {
    "caller": "caller speaking",
    "wait": "silence: waiting for the reply",
    "reply": "agent speaking",
    "hold": "silence: reply still decoding",
}


def call_figure(timelines: Sequence[CallTimeline], path: Path, title: str) -> None:
    """One lane per timeline (top to bottom in the given order); waits labelled in seconds."""
    fig, ax = plt.subplots(figsize=(10, 1.5 + 0.8 * len(timelines)))
    end = max(t.length_s for t in timelines)
    for row, timeline in enumerate(timelines):
        y = len(timelines) - 1 - row
        for segment in timeline.segments():
            width = segment.end_s - segment.start_s
            ax.broken_barh([(segment.start_s, width)], (y - 0.3, 0.6), color=COLORS[segment.kind], lw=0)
            if segment.kind == "caller":
                ax.text(segment.start_s, y - 0.36, f"turn {segment.turn}", ha="left", va="top", fontsize=7)
            if segment.kind == "wait":
                inside = width > 0.06 * end
                ax.text(
                    segment.start_s + width / 2,
                    y if inside else y + 0.38,
                    f"{width:.1f} s",
                    ha="center",
                    va="center" if inside else "bottom",
                    fontsize=8,
                    color="white" if inside else "black",
                )
    ax.set_yticks(range(len(timelines)), [t.label for t in reversed(timelines)])
    ax.set_ylim(-0.75, len(timelines) - 0.2)
    ax.set_xlim(0, end * 1.01)
    ax.set_xlabel("seconds from the start of the clip")
    ax.set_title(title, fontsize=9)
    kinds = [k for k in COLORS if any(s.kind == k for t in timelines for s in t.segments())]
    fig.legend(
        handles=[Patch(color=COLORS[k], label=LEGEND[k]) for k in kinds],
        fontsize=7,
        loc="lower center",
        ncol=len(kinds),
        frameon=False,
    )
    fig.tight_layout(rect=(0, 0.07, 1, 1))
    save_figure(fig, path, dpi=110)
    plt.close(fig)
