"""The runs the write-up's table reads, and no others: the plan `tools/seed_fit.py spread` runs at each point of
the preset fit's near-optimal set (and at the preset when the experiment was saved without its runs).

The conditions come from the table's own getters (`flatshare.colocation.seed_table.table_reads`), so a row
added to the table brings its conditions with it: a condition read at the first caller count only runs
there, one read at every caller count (the pooled "every fix" row, and `alone`, which sets each caller
count's target) runs at each of the plan's caller counts.
"""

from __future__ import annotations

import dataclasses

from flatshare.colocation.experiment import ColocationPlan, pick_conditions
from flatshare.colocation.seed_table import SEED_ROWS, SeedRow, table_reads


def table_plans(plan: ColocationPlan, rows: tuple[SeedRow, ...] = SEED_ROWS) -> tuple[ColocationPlan, ...]:
    """`plan` cut to what `rows` read: one plan at its first caller count with every condition read, and one
    at its other caller counts with the conditions read at every caller count (left out when there are no
    other counts or no such condition). Run both into the same folder: runs share one workload per
    (callers, seed) whatever else the plan holds."""
    reads = table_reads(rows)
    first, *rest = plan.callers
    out = [dataclasses.replace(plan, callers=(first,), conditions=pick_conditions(",".join(reads)))]
    pooled = [key for key, every in reads.items() if every]
    if rest and pooled:
        out.append(
            dataclasses.replace(plan, callers=tuple(rest), conditions=pick_conditions(",".join(pooled)))
        )
    return tuple(out)
