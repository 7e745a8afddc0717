"""The preset fit's loss: the distance of a run's stock-vLLM figures to the write-up's fitted rows.

It reads only rows of kind `fitted` (`flatshare.colocation.seed_table.RowKind`), and only the figures of
`FIT_CONDITIONS` (`alone` and `vllm-priority`): it refuses any other row, and reads the summary through a
view that holds those two conditions and nothing else. `fit_plan` is the plan of the fit's runs (the same
two conditions). `tools/seed_fit.py` ranks grid points by it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

from flatshare.colocation.results import CallerResult, ColocationSummary
from flatshare.colocation.seed_table import FIT_CONDITIONS, SEED_ROWS, RowKind, SeedRow
from flatshare.colocation.setup import Setup

if TYPE_CHECKING:
    from flatshare.colocation.experiment import ColocationPlan

FITTED_ROWS = tuple(row for row in SEED_ROWS if row.kind is RowKind.FITTED)
SHARE_SCALE = 0.1  # a share of turns counts its difference in tens of points


def fit_plan(setup: Setup, seeds: int, duration_s: float) -> ColocationPlan:
    """The runs one grid point of the fit needs: `FIT_CONDITIONS` at 2 callers."""
    from flatshare.colocation.experiment import MAIN_CONDITIONS, ColocationPlan  # imports vLLM (~10 s)

    conditions = tuple(c for c in MAIN_CONDITIONS if c.key in FIT_CONDITIONS)
    return ColocationPlan(
        callers=(2,), seeds=seeds, duration_s=duration_s, drain_s=60.0, conditions=conditions, setup=setup
    )


def _fit_view(summary: ColocationSummary) -> ColocationSummary:
    """`summary` at its first caller count, with `FIT_CONDITIONS` only."""
    first = summary.first
    kept = {key: m for key, m in first.conditions.items() if key in FIT_CONDITIONS}
    callers = summary.callers[0]
    return ColocationSummary(
        version=summary.version,
        voice_pipeline_fixed_s=summary.voice_pipeline_fixed_s,
        callers=(callers,),
        by_callers={callers: CallerResult(first.target_s, kept)},
    )


def loss(summary: ColocationSummary, rows: Sequence[SeedRow] = FITTED_ROWS) -> float:
    """Squared log ratio for times, squared difference in tens of points for shares of turns, summed over
    `rows` (0 is a perfect match; inf when the runs lack a figure). ValueError on a row that is not
    fitted."""
    refused = [row.row for row in rows if row.kind is not RowKind.FITTED]
    if refused:
        raise ValueError(f"seed fit: the loss reads fitted rows only, not {refused}")
    view = _fit_view(summary)
    total = 0.0
    for row in rows:
        value = row.get(view)
        if value is None:
            return math.inf
        if row.share:
            total += ((value - row.seed) / SHARE_SCALE) ** 2
        else:
            total += math.log(max(value, 1e-3) / row.seed) ** 2
    return total
