"""The shipped measured-card profiles against the measured timings, as the Markdown docs/step-model.md
holds between its `ERROR_TABLE` markers (`tools/step_fit.py` writes it; a test checks it)."""

from __future__ import annotations

from pathlib import Path

from flatshare.sim.linear_fit import point_errors, score
from flatshare.sim.measured import CARDS, read_measured
from flatshare.sim.profile import load_profile

BEGIN = "<!-- ERROR_TABLE begin (tools/step_fit.py writes this) -->"
END = "<!-- ERROR_TABLE end -->"


def error_table(root: Path | None = None) -> str:
    """A summary row per card, then every measured token count: measured ms, model ms, error."""
    lines = [
        "| profile | GPU, model | points | largest error | at tokens | median error | additive model's largest |",
        "|---|---|---|---|---|---|---|",
    ]
    columns: list[list[str]] = []
    tokens: tuple[int, ...] = ()
    for card in CARDS:
        measured = read_measured(card, root)
        linear = load_profile(card.profile).linear
        assert linear is not None, f"{card.profile} is not a roofline profile"
        fitted = score(linear, measured)
        lines.append(
            f"| `{card.profile}` | {card.gpu.split(' (')[0]}, {card.model} | {len(measured.tokens)} | "
            f"{fitted.max_abs_error:.1%} | {fitted.worst_tokens:,} | {fitted.median_abs_error:.1%} | "
            f"{additive_error(measured.tokens, measured.seconds):.0%} |"
        )
        errors = point_errors(linear, measured)
        columns.append([f"{e.measured_s * 1e3:.2f} | {e.model_s * 1e3:.2f} | {e.error:+.1%}" for e in errors])
        assert not tokens or tokens == measured.tokens
        tokens = measured.tokens
    lines += ["", "<details><summary>Every token count (ms per pass, all 32 layers)</summary>", ""]
    head = " | ".join(f"{c.profile} measured | model | error" for c in CARDS)
    lines += [f"| tokens | {head} |", "|---" * (1 + 3 * len(CARDS)) + "|"]
    for i, n in enumerate(tokens):
        lines.append(f"| {n:,} | " + " | ".join(col[i] for col in columns) + " |")
    lines += ["", "</details>"]
    return "\n".join(lines)


def additive_error(tokens: tuple[int, ...], seconds: tuple[float, ...]) -> float:
    """The largest |relative error| of the best straight line a + b * tokens over the points (minimax):
    the most an additive model's linear part can do."""
    import numpy as np
    from scipy.optimize import minimize_scalar

    n, t = np.array(tokens, dtype=float), np.array(seconds)

    def worst(b: float) -> float:
        lo, hi = 0.0, float(np.min(t))
        for _ in range(60):  # the intercept that balances the largest over- and under-estimate
            a = (lo + hi) / 2
            e = np.log((a + b * n) / t)
            lo, hi = (a, hi) if -e.min() > e.max() else (lo, a)
        return float(np.max(np.abs((a + b * n) / t - 1)))

    top = float(t.max() / n.max())
    best = minimize_scalar(worst, bounds=(0.0, top), method="bounded", options={"xatol": 1e-12})
    return float(best.fun)


def replace_table(doc: str, table: str) -> str:
    """`doc` with the text between the markers replaced by `table`."""
    head, rest = doc.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    return f"{head}{BEGIN}\n{table}\n{END}{tail}"


def current_table(doc: str) -> str:
    return doc.split(BEGIN, 1)[1].split(END, 1)[0].strip("\n")
