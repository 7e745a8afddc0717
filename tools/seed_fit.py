"""Fit the seed preset's unstated parameters on the stock-vLLM rows, and measure how each one moves the table.

`fit`: runs `alone` and `vllm-priority` (2 callers) for every point of a grid over the parameters the first
seed does not state (max model length, CPU-tier size, vLLM's admission rule, the API pass, the voice agent's
system prompt) and ranks the points by their distance to the seed's stock rows only
(`flatshare.colocation.fit_loss`: rows of kind `fitted` only, read from `alone` and `vllm-priority` only):
squared log ratio for times, squared difference in tens of points for shares of turns.
The grid now holds nine CPU-tier sizes, five KV-cache sizes and three per-request prefill caps (6,480
points); seed-fit.md and seed-fit-async.md were run when it held two tier sizes (8 and 32 GiB) and the
profile's KV cache alone (96 points), seed-fit-cpu-tier.md is the tier axis alone at that KV cache,
seed-fit-kv.md the KV cache against four tier sizes, and seed-fit-prefill-cap.md the cap at the preset's
other values. A table without a parameter's column ran at its default (`_unlisted`).

`refine`: re-runs the best points of a `fit` table with more seeds and longer runs (the grid's ranking is
noisy at 2 seeds), ranked the same way.

`sensitivity`: from the preset (`flatshare.colocation.setup.SEED`), changes one parameter at a time and
reports the stock baseline's and make-room T=48's voice p95, turns over target and KV share of the wait.

    .venv/bin/python tools/seed_fit.py fit --out docs/results/colocation/seed-fit.md
    .venv/bin/python tools/seed_fit.py fit --fix reserve_full_isl=False --out ...   (a slice of the grid)
    .venv/bin/python tools/seed_fit.py fit --fix max_model_len=16384 --fix reserve_full_isl=False \
        --fix api_latency_s=0.06 --fix voice_system_tokens=4000 --fix kv_tokens=40960 --seeds 10 \
        --duration 600 --out docs/results/colocation/seed-fit-cpu-tier.md   (the CPU-tier axis alone)
    .venv/bin/python tools/seed_fit.py fit --fix max_model_len=16384 --fix reserve_full_isl=False \
        --fix api_latency_s=0.06 --fix voice_system_tokens=4000 \
        --fix cpu_tier_tokens=16384,24576,32768,65536 --seeds 10 --duration 600 \
        --out docs/results/colocation/seed-fit-kv.md   (the KV cache against four tier sizes)
    .venv/bin/python tools/seed_fit.py fit --fix max_model_len=16384 --fix reserve_full_isl=False \
        --fix api_latency_s=0.06 --fix voice_system_tokens=4000 --fix cpu_tier_tokens=65536 \
        --fix kv_tokens=45056 --seeds 10 --duration 600 \
        --out docs/results/colocation/seed-fit-prefill-cap.md   (vLLM's per-request prefill cap)
    .venv/bin/python tools/seed_fit.py refine --grid docs/results/colocation/seed-fit.md --top 8 \
        --seeds 5 --duration 600 --out docs/results/colocation/seed-fit-refined.md
    .venv/bin/python tools/seed_fit.py sensitivity --out docs/results/colocation/sensitivity.md

Both write a markdown table (and print it); runs go to a temporary folder.
"""

from __future__ import annotations

import argparse
import itertools
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from flatshare.colocation.experiment import MAIN_CONDITIONS, ColocationPlan, run_plan
from flatshare.colocation.fit_loss import FITTED_ROWS, fit_plan, loss
from flatshare.colocation.results import ColocationSummary
from flatshare.colocation.runs import load_runs
from flatshare.colocation.setup import SEED, Setup
from flatshare.colocation.summary import summarize

GRID: dict[str, tuple[Any, ...]] = {
    "max_model_len": (16384, 32768),
    "cpu_tier_tokens": (8192, 16384, 24576, 32768, 49152, 65536, 98304, 131072, 262144),
    "reserve_full_isl": (True, False),
    "api_latency_s": (0.0, 0.03, 0.06, 0.09),
    "voice_system_tokens": (600, 2000, 4000),
    "kv_tokens": (40960, 43008, 45056, 47104, 49152),
    "long_prefill_token_threshold": (0, 128, 256),
}
SENSITIVITY: tuple[tuple[str, Any], ...] = (
    ("reserve_full_isl", True),
    ("max_model_len", 32768),
    ("kv_tokens", 40960),
    ("kv_tokens", 49152),
    ("cpu_tier_tokens", 0),
    ("cpu_tier_tokens", 24576),
    ("cpu_tier_tokens", 262144),
    ("api_latency_s", 0.0),
    ("voice_system_tokens", 600),
    ("voice_system_tokens", 2000),
    ("agent_source", "weka"),
    ("async_scheduling", False),
    ("long_prefill_token_threshold", 128),
)


def _run(plan: ColocationPlan) -> ColocationSummary:
    with tempfile.TemporaryDirectory(prefix="flatshare-seed-fit-") as tmp:
        run_plan(Path(tmp), plan)
        return summarize(load_runs(Path(tmp)))


def _summary(setup: Setup, keys: Iterable[str], seeds: int, duration: float) -> ColocationSummary:
    conditions = tuple(c for c in MAIN_CONDITIONS if c.key in set(keys))
    plan = ColocationPlan(
        callers=(2,), seeds=seeds, duration_s=duration, drain_s=60.0, conditions=conditions, setup=setup
    )
    return _run(plan)


def _fitted_cells(summary: ColocationSummary) -> list[str]:
    return [f"{row.get(summary) or 0:.3g}" for row in FITTED_ROWS]


def _rank(points: Iterable[tuple[Any, ...]], seeds: int, duration: float, title: str) -> list[str]:
    names = list(GRID)
    header = [row.row.split(": ", 1)[-1] for row in FITTED_ROWS]
    results = []
    for values in points:
        setup = SEED.with_changes(**dict(zip(names, values, strict=True)))
        summary = _run(fit_plan(setup, seeds, duration))
        results.append((loss(summary), values, _fitted_cells(summary)))
        print(f"{loss(summary):8.3f}  {dict(zip(names, values, strict=True))}", flush=True)
    seed_cells = [f"{row.seed:.3g}" for row in FITTED_ROWS]
    lines = [
        f"{title} on the seed's stock rows ({seeds} seeds x {duration:.0f} virtual s, 2 callers, "
        f"{_mode(SEED)}); lower loss is closer.",
        "",
        "| loss | " + " | ".join(names) + " | " + " | ".join(header) + " |",
        "|---" * (len(names) + len(header) + 1) + "|",
        "| seed | " + " | ".join("" for _ in names) + " | " + " | ".join(seed_cells) + " |",
    ]
    for value, point, cells in sorted(results, key=lambda r: r[0]):
        lines.append(f"| {value:.3f} | " + " | ".join(map(str, point)) + " | " + " | ".join(cells) + " |")
    return lines


def _mode(setup: Setup) -> str:
    return "async scheduling" if setup.async_scheduling else "synchronous scheduling"


def _typed(name: str, text: str) -> Any:
    """`text` (as the tables print it) as a value of the grid's parameter `name`; ValueError if it is not
    one of the grid's values."""
    values = GRID[name]
    if isinstance(values[0], bool):
        value: Any = {"True": True, "False": False}.get(text)
    else:
        try:
            value = type(values[0])(text)
        except ValueError:
            value = None
    if value not in values:
        raise ValueError(f"{name} takes one of {values}, got {text!r}")
    return value


def _grid_values(item: str) -> tuple[str, tuple[Any, ...]]:
    """One `--fix NAME=VALUE[,VALUE...]`: the grid parameter and the values of it to run; SystemExit with
    the reason if not."""
    name, sep, text = item.partition("=")
    if not sep or name not in GRID:
        raise SystemExit(f"--fix: want NAME=VALUE with NAME one of {', '.join(GRID)}, got {item!r}")
    try:
        return name, tuple(dict.fromkeys(_typed(name, part.strip()) for part in text.split(",")))
    except ValueError as exc:
        raise SystemExit(f"--fix: {exc}") from None


def fit(seeds: int, duration: float, fixed: dict[str, tuple[Any, ...]] | None = None) -> list[str]:
    """Every grid point, or those with the `fixed` parameters at the given values (a slice of the grid)."""
    fixed = fixed or {}
    axes = [fixed.get(name, values) for name, values in GRID.items()]
    chosen = ", ".join(f"{name} = {' / '.join(map(str, values))}" for name, values in fixed.items())
    title = "Grid fit" + (f" ({chosen})" if fixed else "")
    return _rank(itertools.product(*axes), seeds, duration, title)


def _unlisted(name: str) -> Any:
    """The value a `fit` table that has no column for `name` ran at: Setup's default (tables written before
    kv_tokens joined the grid ran at the profile's KV cache)."""
    if name == "kv_tokens":
        return Setup().kv_cache_tokens()
    return getattr(Setup(), name)


def refine(grid_table: Path, top: int, seeds: int, duration: float) -> list[str]:
    """Re-run the `top` points of a `fit` table with more seeds and longer runs."""
    lines = grid_table.read_text().splitlines()
    header = next((line for line in lines if line.startswith("| loss |")), None)
    if header is None:
        raise SystemExit(f"--grid: {grid_table} has no `| loss | ...` table")
    columns = [c.strip() for c in header.strip("|").split("|")]
    rows = [line for line in lines if line.startswith("| ") and line[2].isdigit()]
    points = []
    for line in rows[:top]:
        cells = dict(zip(columns, (c.strip() for c in line.strip("|").split("|")), strict=False))
        points.append(tuple(_typed(name, cells[name]) if name in cells else _unlisted(name) for name in GRID))
    return _rank(points, seeds, duration, f"The {top} best grid points re-run")


def _sensitivity_row(label: str, summary: ColocationSummary) -> str:
    cells = [label]
    for key in ("vllm-priority", "make-room-t48"):
        m = summary.conditions[key]
        share = m.voice_wait_kv_share
        cells += [
            f"{m.voice_turn_p95_s or 0.0:.2f}",
            f"{m.voice_over_target_frac or 0.0:.0%}",
            f"{m.voice_ttft_mean_s or 0.0:.2f}",
            f"{m.stage_first_sentence_mean_s or 0.0:.2f}",
            "-" if share is None else f"{share:.0%}",
        ]
    return "| " + " | ".join(cells) + " |"


def sensitivity(seeds: int, duration: float) -> list[str]:
    keys = ("alone", "vllm-priority", "make-room-t48")
    cols = ("p95 s", "over target", "TTFT mean s", "1st sentence mean s", "KV share of wait")
    lines = [
        f"One unstated parameter changed at a time from the seed preset ({seeds} seeds x {duration:.0f} "
        f"virtual s, 2 callers, {_mode(SEED)} unless the row changes it).",
        "",
        "| setup | "
        + " | ".join(f"stock {c}" for c in cols)
        + " | "
        + " | ".join(f"T=48 {c}" for c in cols)
        + " |",
        "|---" * (1 + 2 * len(cols)) + "|",
        _sensitivity_row("seed preset", _summary(SEED, keys, seeds, duration)),
    ]
    for name, value in SENSITIVITY:
        summary = _summary(SEED.with_changes(**{name: value}), keys, seeds, duration)
        lines.append(_sensitivity_row(f"{name} = {value}", summary))
        print(lines[-1], flush=True)
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("mode", choices=("fit", "refine", "sensitivity"))
    parser.add_argument("--grid", type=Path, help="refine: the table `fit` wrote")
    parser.add_argument("--top", type=int, default=6)
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--duration", type=float, default=300.0)
    parser.add_argument("--out", type=Path)
    parser.add_argument(
        "--fix",
        action="append",
        default=[],
        metavar="NAME=VALUE[,VALUE...]",
        help="fit: run only the grid points with this parameter at these values (repeatable)",
    )
    args = parser.parse_args()
    if args.fix and args.mode != "fit":
        parser.error("--fix: only with fit")
    if args.mode == "refine":
        lines = refine(args.grid, args.top, args.seeds, args.duration)
    elif args.mode == "fit":
        lines = fit(args.seeds, args.duration, dict(_grid_values(item) for item in args.fix))
    else:
        lines = sensitivity(args.seeds, args.duration)
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text)


if __name__ == "__main__":
    main()
