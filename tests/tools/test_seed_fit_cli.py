"""tools/seed_fit.py's grid options: a `--fix NAME=VALUE` names a grid parameter and one of its values,
and anything else stops with the reason (before, `--fix reserve_full_isl=yes`, or `=` left out, ran the
`False` slice)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

pytestmark = pytest.mark.vllm


@pytest.fixture(scope="module")
def seed_fit() -> ModuleType:
    path = Path(__file__).parents[2] / "tools" / "seed_fit.py"
    spec = importlib.util.spec_from_file_location("seed_fit", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_fix_takes_a_grid_value_of_the_parameters_type(seed_fit: ModuleType) -> None:
    assert seed_fit._grid_value("reserve_full_isl=False") == ("reserve_full_isl", False)
    assert seed_fit._grid_value("api_latency_s=0.06") == ("api_latency_s", 0.06)
    assert seed_fit._grid_value("max_model_len=32768") == ("max_model_len", 32768)


@pytest.mark.parametrize(
    ("item", "reason"),
    [
        ("reserve_full_isl=yes", "reserve_full_isl takes one of (True, False), got 'yes'"),
        ("reserve_full_isl", "want NAME=VALUE"),
        ("api_latency_s=0.5", "api_latency_s takes one of"),
        ("max_model_len=lots", "max_model_len takes one of"),
        ("foo=1", "want NAME=VALUE with NAME one of max_model_len"),
    ],
)
def test_a_fix_outside_the_grid_stops_with_the_reason(seed_fit: ModuleType, item: str, reason: str) -> None:
    with pytest.raises(SystemExit, match=reason.replace("(", r"\(").replace(")", r"\)")):
        seed_fit._grid_value(item)


def test_refine_reads_the_values_a_table_prints(
    seed_fit: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    table = tmp_path / "grid.md"
    table.write_text(
        "| loss | a |\n|---|---|\n| seed | |\n"
        "| 1.0 | 16384 | 65536 | False | 0.06 | 4000 | 9 |\n| 2.0 | 32768 | 262144 | True | 0.0 | 600 | 9 |\n"
    )
    ranked: list[tuple[object, ...]] = []
    monkeypatch.setattr(seed_fit, "_rank", lambda points, *_: ranked.extend(points) or [])
    seed_fit.refine(table, 2, 1, 1.0)
    assert ranked == [(16384, 65536, False, 0.06, 4000), (32768, 262144, True, 0.0, 600)]
