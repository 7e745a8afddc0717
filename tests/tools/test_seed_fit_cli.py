"""tools/seed_fit.py's grid options: a `--fix NAME=VALUE[,VALUE...]` names a grid parameter and some of its
values, and anything else stops with the reason (before, `--fix reserve_full_isl=yes`, or `=` left out, ran
the `False` slice); `refine` reads a table's points by its header, tables from before a parameter joined the
grid included."""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path
from types import ModuleType

import pytest

pytestmark = pytest.mark.vllm


def _capture_points(seed_fit: ModuleType, monkeypatch: pytest.MonkeyPatch) -> list[tuple[object, ...]]:
    """The points `fit` or `refine` would run, in order, without running them."""
    ranked: list[tuple[object, ...]] = []

    def rank(points: Iterable[tuple[object, ...]], *_: object) -> list[str]:
        ranked.extend(points)
        return []

    monkeypatch.setattr(seed_fit, "_rank", rank)
    return ranked


def test_a_fix_takes_grid_values_of_the_parameters_type(seed_fit: ModuleType) -> None:
    assert seed_fit._grid_values("reserve_full_isl=False") == ("reserve_full_isl", (False,))
    assert seed_fit._grid_values("api_latency_s=0.06") == ("api_latency_s", (0.06,))
    assert seed_fit._grid_values("max_model_len=32768") == ("max_model_len", (32768,))
    assert seed_fit._grid_values("kv_tokens=45056, 40960,45056") == ("kv_tokens", (45056, 40960))


def test_a_fixed_slice_runs_every_combination_of_the_values_given(
    seed_fit: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    ranked = _capture_points(seed_fit, monkeypatch)
    fixed = {name: values[:1] for name, values in seed_fit.GRID.items()}
    fixed["cpu_tier_tokens"] = (16384, 24576)
    fixed["kv_tokens"] = (40960, 45056)
    seed_fit.fit(1, 1.0, fixed)
    names = list(seed_fit.GRID)
    tier, kv = names.index("cpu_tier_tokens"), names.index("kv_tokens")
    tiers_and_kv = [(point[tier], point[kv]) for point in ranked]
    assert tiers_and_kv == [(16384, 40960), (16384, 45056), (24576, 40960), (24576, 45056)]


@pytest.mark.parametrize(
    ("item", "reason"),
    [
        ("reserve_full_isl=yes", "reserve_full_isl takes one of (True, False), got 'yes'"),
        ("reserve_full_isl", "want NAME=VALUE"),
        ("api_latency_s=0.5", "api_latency_s takes one of"),
        ("max_model_len=lots", "max_model_len takes one of"),
        ("foo=1", "want NAME=VALUE with NAME one of max_model_len"),
        ("kv_tokens=40960,41000", "kv_tokens takes one of"),
    ],
)
def test_a_fix_outside_the_grid_stops_with_the_reason(seed_fit: ModuleType, item: str, reason: str) -> None:
    with pytest.raises(SystemExit, match=re.escape(reason)):
        seed_fit._grid_values(item)


def test_refine_reads_the_values_a_table_prints(
    seed_fit: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    table = tmp_path / "grid.md"
    names = " | ".join(seed_fit.GRID)
    table.write_text(
        f"| loss | {names} | turn p95 s |\n|---|---|\n| seed | | | | | | | 1.8 |\n"
        "| 1.0 | 16384 | 65536 | False | 0.06 | 4000 | 45056 | 0 | 9 |\n"
        "| 2.0 | 32768 | 262144 | True | 0.0 | 600 | 40960 | 128 | 9 |\n"
    )
    ranked = _capture_points(seed_fit, monkeypatch)
    seed_fit.refine(table, 2, 1, 1.0)
    assert ranked == [
        (16384, 65536, False, 0.06, 4000, 45056, 0),
        (32768, 262144, True, 0.0, 600, 40960, 128),
    ]


def test_refine_runs_a_table_from_before_the_kv_cache_joined_the_grid_at_the_profiles_kv_cache(
    seed_fit: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    table = tmp_path / "old.md"
    table.write_text(
        "| loss | max_model_len | cpu_tier_tokens | reserve_full_isl | api_latency_s | voice_system_tokens |"
        " turn p95 s |\n|---|---|\n| 1.0 | 16384 | 65536 | False | 0.06 | 4000 | 9 |\n"
    )
    ranked = _capture_points(seed_fit, monkeypatch)
    seed_fit.refine(table, 1, 1, 1.0)
    assert ranked == [(16384, 65536, False, 0.06, 4000, 40960, 0)]  # and vLLM's default: no prefill cap


def test_refine_stops_on_a_file_without_a_table(seed_fit: ModuleType, tmp_path: Path) -> None:
    (tmp_path / "notes.md").write_text("no table here\n")
    with pytest.raises(SystemExit, match=re.escape("no `| loss | ...` table")):
        seed_fit.refine(tmp_path / "notes.md", 1, 1, 1.0)


def test_every_grid_point_runs_alone_and_vllm_priority_only_and_is_ranked_by_the_fitted_rows(
    seed_fit: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    from flatshare.colocation.fit_loss import FITTED_ROWS
    from flatshare.colocation.seed_table import FIT_CONDITIONS
    from flatshare.colocation.summary import load_summary

    full_run = load_summary(Path(__file__).resolve().parents[2] / "docs/results/colocation/summary.json")
    plans = []

    def run(plan: object, splits: int = 8) -> tuple[object, float]:
        plans.append(plan)
        return full_run, 0.01

    monkeypatch.setattr(seed_fit, "_run_with_noise", run)
    lines = seed_fit.fit(1, 1.0, {name: values[:1] for name, values in seed_fit.GRID.items()})
    assert len(plans) == 1 and sorted(c.key for c in plans[0].conditions) == sorted(FIT_CONDITIONS)
    header = next(line for line in lines if line.startswith("| loss |"))
    assert header.count("|") == len(seed_fit.GRID) + len(FITTED_ROWS) + 3  # loss, noise, grid, rows
    assert lines[-1].startswith(f"| {seed_fit.loss(full_run):.3f} | 0.010 |")


def test_the_near_optimal_set_is_every_point_within_twice_the_noise_of_the_best(
    seed_fit: ModuleType, tmp_path: Path
) -> None:
    table = tmp_path / "refined.md"
    names = " | ".join(seed_fit.GRID)
    table.write_text(
        f"| loss | noise | {names} | turn p95 s |\n|---|---|\n"
        "| 0.54 | 0.040 | 16384 | 65536 | False | 0.06 | 6000 | 45056 | 0 | 9 |\n"
        "| 0.45 | 0.050 | 16384 | 65536 | False | 0.06 | 4000 | 45056 | 0 | 9 |\n"
        "| 0.52 | 0.040 | 16384 | 32768 | False | 0.06 | 4000 | 45056 | 0 | 9 |\n"
        "| 0.90 | 0.100 | 16384 | 24576 | False | 0.06 | 4000 | 47104 | 0 | 9 |\n"
    )
    assert seed_fit.near_optimal(table) == [
        (16384, 65536, False, 0.06, 4000, 45056, 0),
        (16384, 32768, False, 0.06, 4000, 45056, 0),
        (16384, 65536, False, 0.06, 6000, 45056, 0),
    ]  # 0.90 - 0.45 is more than twice its 0.100


def test_a_table_without_noise_has_no_near_optimal_set(seed_fit: ModuleType, tmp_path: Path) -> None:
    table = tmp_path / "old.md"
    names = " | ".join(seed_fit.GRID)
    table.write_text(
        f"| loss | {names} |\n|---|\n| 0.45 | 16384 | 65536 | False | 0.06 | 4000 | 45056 | 0 |\n"
    )
    with pytest.raises(SystemExit, match="no noise column"):
        seed_fit.near_optimal(table)


def test_spread_runs_only_what_the_table_reads_at_each_point_and_at_the_preset_when_asked(
    seed_fit: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from flatshare.colocation.experiment import ColocationPlan
    from flatshare.colocation.seed_table import table_reads
    from flatshare.colocation.setup import SEED

    table = tmp_path / "refined.md"
    names = " | ".join(seed_fit.GRID)
    table.write_text(
        f"| loss | noise | {names} |\n|---|---|\n"
        "| 0.20 | 0.050 | 16384 | 65536 | False | 0.06 | 6000 | 45056 | 0 |\n"
        "| 0.25 | 0.050 | 16384 | 65536 | False | 0.06 | 4000 | 45056 | 0 |\n"
    )
    runs: dict[Path, list[ColocationPlan]] = {}

    def run_plan(out: Path, plan: ColocationPlan, jobs: object = None) -> None:
        runs.setdefault(out, []).append(plan)
        (out / "runs").mkdir(parents=True, exist_ok=True)

    monkeypatch.setattr(seed_fit, "run_plan", run_plan)
    monkeypatch.setattr(seed_fit, "build_report", lambda out: None)
    experiment = tmp_path / "full"
    roofline = SEED.with_changes(profile="llama3-8b-24gb-roofline")
    seed_fit.spread(table, experiment, ColocationPlan(seeds=5, setup=roofline), run_preset=True)
    point = experiment / "spread" / "voice_system_tokens=6000"
    assert set(runs) == {experiment, point}
    for plans in runs.values():
        cells = {(c.key, n) for plan in plans for n in plan.callers for c in plan.conditions}
        assert {key for key, _ in cells} == set(table_reads())
        assert len(cells) == 12 and {n for _, n in cells} == {2, 4, 6}  # not the 305-run plan's 61 a seed
        assert {plan.setup.profile for plan in plans} == {"llama3-8b-24gb-roofline"}
    assert {plan.setup.voice_system_tokens for plan in runs[point]} == {6000}
    assert {plan.setup for plan in runs[experiment]} == {roofline}
