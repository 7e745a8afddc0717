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
noisy at 2 seeds), ranked the same way. Both give each point's loss a standard error (`noise`, from halving
the seeds).

`spread`: the near-optimal set of a `refine` table (every point whose loss is within twice the noise of the
best's) run beside an experiment at the preset, into its `spread/` folder, through only the runs the
write-up's table reads (`flatshare.colocation.table_plan`: its conditions at the first caller count, the
pooled "every fix" row's at each); its report's seed rows then carry their range over the set (`spread_low`,
`spread_high`). `--run-preset` runs the same at the preset first (an experiment saved without runs/);
`--profile` runs it all under another step model, the preset's other parameters unchanged (a prediction,
not a refit).

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
    .venv/bin/python tools/seed_fit.py spread --grid docs/results/colocation/seed-fit-refit-refined.md \
        --experiment out/colocation --seeds 2 --duration 300 --drain 60   (the quick run's near-optimal spread)
    .venv/bin/python tools/seed_fit.py spread --grid docs/results/colocation/seed-fit-refit-refined.md \
        --experiment FULL --run-preset --callers 2,4,6 --seeds 5 --duration 600 --workers 1
        (the full run's, FULL a copy of docs/results/colocation; --profile llama3-8b-24gb-roofline: the
        roofline model's)

Both write a markdown table (and print it); runs go to a temporary folder.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import math
import random
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from flatshare.colocation.experiment import MAIN_CONDITIONS, ColocationPlan, pending_jobs, run_plan
from flatshare.colocation.fit_loss import FITTED_ROWS, fit_plan, loss
from flatshare.colocation.report import SPREAD_FOLDER, build_report
from flatshare.colocation.results import ColocationSummary
from flatshare.colocation.runs import load_runs
from flatshare.colocation.setup import SEED, Setup
from flatshare.colocation.summary import summarize
from flatshare.colocation.table_plan import table_plans

GRID: dict[str, tuple[Any, ...]] = {
    "max_model_len": (16384, 32768),
    "cpu_tier_tokens": (8192, 16384, 24576, 32768, 49152, 65536, 98304, 131072, 262144),
    "reserve_full_isl": (True, False),
    "api_latency_s": (0.0, 0.03, 0.06, 0.09),
    "voice_system_tokens": (600, 2000, 4000, 5000, 6000, 8000),
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
    return _run_with_noise(plan, splits=0)[0]


def _run_with_noise(plan: ColocationPlan, splits: int = 8) -> tuple[ColocationSummary, float | None]:
    """The plan's summary, and the standard error of its loss: over `splits` random halvings of the seeds,
    the root mean square of the two halves' loss difference, halved (the difference of two independent
    half-sample losses has twice a half's variance, which is twice the whole sample's). None under 4 seeds
    or with `splits` 0."""
    with tempfile.TemporaryDirectory(prefix="flatshare-seed-fit-") as tmp:
        run_plan(Path(tmp), plan)
        runs = load_runs(Path(tmp))
    summary = summarize(runs)
    seeds = sorted({run.seed for run in runs})
    if splits == 0 or len(seeds) < 4:
        return summary, None
    rng = random.Random(0)
    squares = []
    for _ in range(splits):
        half = set(rng.sample(seeds, len(seeds) // 2))
        a = summarize([r for r in runs if r.seed in half])
        b = summarize([r for r in runs if r.seed not in half])
        squares.append((loss(a) - loss(b)) ** 2)
    return summary, math.sqrt(sum(squares) / len(squares)) / 2


def _summary(setup: Setup, keys: Iterable[str], seeds: int, duration: float) -> ColocationSummary:
    conditions = tuple(c for c in MAIN_CONDITIONS if c.key in set(keys))
    plan = ColocationPlan(
        callers=(2,), seeds=seeds, duration_s=duration, drain_s=60.0, conditions=conditions, setup=setup
    )
    return _run(plan)


def _fitted_cells(summary: ColocationSummary) -> list[str]:
    return [f"{row.get(summary) or 0:.3g}" for row in FITTED_ROWS]


def _rank(
    points: Iterable[tuple[Any, ...]], seeds: int, duration: float, title: str, workers: int | None = None
) -> list[str]:
    names = list(GRID)
    header = [row.row.split(": ", 1)[-1] for row in FITTED_ROWS]
    results = []
    for values in points:
        setup = SEED.with_changes(**dict(zip(names, values, strict=True)))
        plan = fit_plan(setup, seeds, duration)
        summary, noise = _run_with_noise(
            plan if workers is None else dataclasses.replace(plan, workers=workers)
        )
        results.append((loss(summary), noise, values, _fitted_cells(summary)))
        print(
            f"{loss(summary):8.3f} +- {noise or 0:.3f}  {dict(zip(names, values, strict=True))}", flush=True
        )
    seed_cells = [f"{row.seed:.3g}" for row in FITTED_ROWS]
    lines = [
        f"{title} on the seed's stock rows ({seeds} seeds x {duration:.0f} virtual s, 2 callers, "
        f"{_mode(SEED)}); lower loss is closer. `noise`: the loss's standard error from halving the seeds "
        "(`_run_with_noise`).",
        "",
        "| loss | noise | " + " | ".join(names) + " | " + " | ".join(header) + " |",
        "|---" * (len(names) + len(header) + 2) + "|",
        "| seed | | " + " | ".join("" for _ in names) + " | " + " | ".join(seed_cells) + " |",
    ]
    for value, noise, point, cells in sorted(results, key=lambda r: r[0]):
        shown = "-" if noise is None else f"{noise:.3f}"
        lines.append(
            f"| {value:.3f} | {shown} | " + " | ".join(map(str, point)) + " | " + " | ".join(cells) + " |"
        )
    return lines


def _table_points(grid_table: Path) -> list[tuple[float, float | None, tuple[Any, ...]]]:
    """A `fit`/`refine` table's rows as (loss, noise or None, grid point), best first."""
    lines = grid_table.read_text().splitlines()
    header = next((line for line in lines if line.startswith("| loss |")), None)
    if header is None:
        raise SystemExit(f"--grid: {grid_table} has no `| loss | ...` table")
    columns = [c.strip() for c in header.strip("|").split("|")]
    out = []
    for line in (line for line in lines if line.startswith("| ") and line[2].isdigit()):
        cells = dict(zip(columns, (c.strip() for c in line.strip("|").split("|")), strict=False))
        point = tuple(_typed(name, cells[name]) if name in cells else _unlisted(name) for name in GRID)
        noise = cells.get("noise")
        out.append((float(cells["loss"]), float(noise) if noise not in (None, "", "-") else None, point))
    return sorted(out, key=lambda row: row[0])


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


def refine(grid_table: Path, top: int, seeds: int, duration: float, workers: int | None = None) -> list[str]:
    """Re-run the `top` points of a `fit` table with more seeds and longer runs (`workers`: local processes,
    None: the plan's default)."""
    points = [point for _, _, point in _table_points(grid_table)[:top]]
    return _rank(points, seeds, duration, f"The {top} best grid points re-run", workers)


def near_optimal(grid_table: Path) -> list[tuple[Any, ...]]:
    """The points of a `refine` table whose loss is within the noise of the best: less than the best's
    loss plus twice the larger of the two points' standard errors (about a 95% band on their difference)."""
    rows = _table_points(grid_table)
    best, best_noise, _ = rows[0]
    if best_noise is None:
        raise SystemExit(f"--grid: {grid_table} has no noise column (re-run it with `refine`)")
    return [point for value, noise, point in rows if value - best <= 2 * max(best_noise, noise or 0.0)]


def spread(
    grid_table: Path,
    experiment: Path,
    plan: ColocationPlan,
    run_preset: bool = False,
    resume: bool = False,
) -> list[str]:
    """Run what the write-up's table reads (`table_plans` of `plan`, whose setup is the preset's, or another
    step model's profile with the preset's other parameters) at every near-optimal point but the preset into
    `experiment/spread/<point>`, and rebuild `experiment`'s report, whose seed rows then carry their range over
    the set. `run_preset`: first run the same at `plan`'s own setup into `experiment` (for an experiment
    saved without its runs/, such as the committed full run). `resume`: keep the runs the same plan already
    saved there (an interrupted spread) and run only the rest."""
    if run_preset:
        for part in table_plans(plan):
            run_plan(experiment, part, jobs=pending_jobs(experiment, part, resume))
    if not (experiment / "runs").is_dir():
        raise SystemExit(f"--experiment: {experiment} has no runs/ (run the preset's experiment there first)")
    names = list(GRID)
    preset = tuple(getattr(SEED, name) if name != "kv_tokens" else SEED.kv_tokens for name in names)
    points = [p for p in near_optimal(grid_table) if p != preset]
    lines = [f"Near-optimal set of {grid_table.name}: the preset and {len(points)} other point(s).", ""]
    for point in points:
        changes = {n: v for n, v in zip(names, point, strict=True) if getattr(SEED, n) != v}
        label = ",".join(f"{n}={v}" for n, v in changes.items())
        for part in table_plans(dataclasses.replace(plan, setup=plan.setup.with_changes(**changes))):
            folder = experiment / SPREAD_FOLDER / label
            run_plan(folder, part, jobs=pending_jobs(folder, part, resume))
        lines.append(f"- {label}")
    build_report(experiment)
    return lines


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
    parser.add_argument("mode", choices=("fit", "refine", "sensitivity", "spread"))
    parser.add_argument("--experiment", type=Path, help="spread: the preset's co-location experiment folder")
    parser.add_argument("--callers", default="2", help="spread: caller counts, comma-separated")
    parser.add_argument(
        "--drain", type=float, default=120.0, help="spread: the experiment's drain (quick: 60)"
    )
    parser.add_argument(
        "--profile", help="spread: another step model's profile, the preset's other parameters unchanged"
    )
    parser.add_argument(
        "--run-preset",
        action="store_true",
        help="spread: first run what the table reads at the preset into --experiment (saved without runs/)",
    )
    parser.add_argument(
        "--resume",
        action="store_true",
        help="spread: keep the runs the same plan already saved (an interrupted spread), run the rest",
    )
    parser.add_argument("--grid", type=Path, help="refine: the table `fit` wrote")
    parser.add_argument("--top", type=int, default=6)
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--duration", type=float, default=300.0)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--workers", type=int, help="refine, spread: local processes [one per core, max 2]")
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
        lines = refine(args.grid, args.top, args.seeds, args.duration, args.workers)
    elif args.mode == "spread":
        if args.grid is None or args.experiment is None:
            parser.error("spread: needs --grid (a refine table) and --experiment")
        plan = ColocationPlan(
            callers=tuple(int(c) for c in args.callers.split(",")),
            seeds=args.seeds,
            duration_s=args.duration,
            drain_s=args.drain,
            setup=SEED if args.profile is None else SEED.with_changes(profile=args.profile),
        )
        if args.workers is not None:
            plan = dataclasses.replace(plan, workers=args.workers)
        lines = spread(args.grid, args.experiment, plan, args.run_preset, args.resume)
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
