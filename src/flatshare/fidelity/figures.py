"""The fidelity figure: CDFs of time to first token, inter-token gap and end-to-end time, real vs sim."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

from flatshare.fidelity.measures import samples_of
from flatshare.fidelity.runs import RunData

PANELS = (("ttft", "time to first token (s)"), ("gap", "inter-token gap (s)"), ("e2e", "end to end (s)"))
STYLES = ("-", ":", "-.", (0, (1, 3)))
COLORS = ("tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple")


def cdf_figure(real: Sequence[RunData], sim: RunData, path: Path, title: str) -> Path:
    """Write a PNG with one panel per quantity; one line per run and class (sim dashed, black edge)."""
    fig, axes = plt.subplots(1, len(PANELS), figsize=(15, 4.2))
    runs = [*real, sim]
    raw = {run.name: samples_of(run.records) for run in runs}
    classes = sorted({cls for by_class in raw.values() for cls in by_class if cls != "all"})
    for ax, (quantity, label) in zip(axes, PANELS, strict=True):
        for c, cls in enumerate(classes):
            for i, run in enumerate(runs):
                xs = np.sort(np.asarray(raw[run.name].get(cls, {}).get(quantity, []), dtype=float))
                if xs.size == 0:
                    continue
                xs = np.maximum(xs, 1e-5)  # gaps of 0 (tokens read together) on a log axis
                style = "--" if run is sim else STYLES[i % len(STYLES)]
                width = 2.2 if run is sim else 1.4
                ax.step(
                    xs,
                    np.arange(1, xs.size + 1) / xs.size,
                    where="post",
                    linestyle=style,
                    linewidth=width,
                    color=COLORS[c % len(COLORS)],
                    label=f"{cls} {run.name}",
                )
        ax.set_xscale("log")
        ax.set_xlabel(label)
        ax.set_ylabel("fraction")
        ax.grid(True, which="both", alpha=0.3)
    axes[0].legend(fontsize=7, loc="lower right")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
