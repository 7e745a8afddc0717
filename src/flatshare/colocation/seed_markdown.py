"""The write-up's table (the first source document's figures beside flatshare's,
`flatshare.colocation.seed_table`) as markdown, for report.md and the README.

Figures are shown as the write-up words them where a row says so (`SeedRow.said`, `SeedRow.fmt`): shares as
percentages, the share of turns over 10 s as "1 in N", ratios between conditions as factors.
"""

from __future__ import annotations

from flatshare.colocation.results import SeedComparisonRow
from flatshare.colocation.seed_table import SEED_ROW_BY_NAME, Format, RowKind

HEADER = (
    "| row | write-up | flatshare | 95% CI (calls resampled) | ratio | engine s: write-up / flatshare (ratio) | kind "
    "| hit |"
)


def row_format(row: str) -> Format:
    found = SEED_ROW_BY_NAME.get(row)
    return "g" if found is None else found.fmt


def shown(value: float, fmt: Format) -> str:
    """One figure as the table shows it."""
    if fmt == "pct":
        return f"{value * 100:.3g}%"
    if fmt == "one_in":
        return f"1 in {1 / value:.0f}" if value > 0 else "none"
    if fmt == "x":
        return f"{value:.2f}x"
    return f"{value:.3g}"


def _interval(ci: tuple[float, float], fmt: Format) -> str:
    low, high = ci
    if fmt == "pct":
        return f"{low * 100:.3g}-{high * 100:.3g}%"
    if fmt == "one_in":
        return f"{shown(low, fmt)} to {shown(high, fmt)}"
    return f"{shown(low, fmt)}-{shown(high, fmt)}"


def seed_shown(r: SeedComparisonRow) -> str:
    found = SEED_ROW_BY_NAME.get(r.row)
    if found is not None and found.said:
        return found.said
    return f"{r.seed:g}" if row_format(r.row) == "g" else shown(r.seed, row_format(r.row))


def _engine(r: SeedComparisonRow) -> str:
    if r.seed_engine_s is None:
        return "-"
    if r.engine_s is None:
        return f"{r.seed_engine_s:.3g} / -"
    return f"{r.seed_engine_s:.3g} / {r.engine_s:.3g} ({r.engine_s / r.seed_engine_s:.2f})"


def _spread(r: SeedComparisonRow, fmt: Format) -> str:
    if r.spread_low is None or r.spread_high is None:
        return "-"
    return _interval((r.spread_low, r.spread_high), fmt)


def seed_table_lines(rows: tuple[SeedComparisonRow, ...]) -> list[str]:
    """The comparison as a markdown table; with a column for the near-optimal set's spread when a row has
    one (`flatshare.colocation.seed_table.spreads_over`)."""
    spread = any(r.spread_low is not None for r in rows)
    header = (
        HEADER.replace(" | ratio |", " | spread over the near-optimal set | ratio |") if spread else HEADER
    )
    lines = [header, "|---" * header.count(" |") + "|"]
    for r in rows:
        fmt = row_format(r.row)
        value = "-" if r.flatshare is None else shown(r.flatshare, fmt)
        ci = "-" if r.ci is None else _interval(r.ci, fmt)
        ratio = "-" if r.ratio is None else f"{r.ratio:.2f}"
        hit = "-" if r.hit is None else ("yes" if r.hit else "**no**")
        cells = [r.row, seed_shown(r), value, ci, *([_spread(r, fmt)] if spread else []), ratio, _engine(r)]
        lines.append("| " + " | ".join([*cells, r.kind, hit]) + " |")
    return lines


def seed_counts_line(rows: tuple[SeedComparisonRow, ...]) -> str:
    """How many rows of each kind are within tolerance (rows the runs lack are not counted)."""
    parts = []
    for kind, label in (
        (RowKind.FITTED, "Fitted rows (the preset's unstated parameters were chosen on these only)"),
        (RowKind.CALIBRATED, "calibrated rows (pinned by a choice made to match them; not predictions)"),
        (RowKind.PREDICTION, "predictions, not refitted"),
    ):
        judged = [r for r in rows if r.kind == kind and r.hit is not None]
        parts.append(f"{label}: {sum(bool(r.hit) for r in judged)} of {len(judged)} within tolerance")
    return (
        "; ".join(parts) + ". Turn rows are judged on engine time (the turn less the fixed voice pipeline)."
    )
