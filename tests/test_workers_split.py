"""The split of the suite over xdist workers (tests/kit/workers.py): the vLLM unit lists real modules that
start servers or use tiny models, and every other module is its own unit."""

from __future__ import annotations

import re
from pathlib import Path

from kit.workers import SERVE_SIM_MODULES, TINY_MODEL_FIXTURES, VLLM_LANES, VLLM_MODULES, unit_of

ROOT = Path(__file__).resolve().parents[1]
USES_VLLM = re.compile(r"mark\.server|\b(" + "|".join(sorted(TINY_MODEL_FIXTURES)) + r")\b")


def test_each_listed_module_exists_and_starts_servers_or_uses_a_tiny_model() -> None:
    for module in sorted(VLLM_MODULES):
        path = ROOT / module
        assert path.is_file(), module
        assert USES_VLLM.search(path.read_text()), f"{module} neither has server tests nor uses a tiny model"


def test_each_lane_is_one_unit_and_the_others_are_one_unit_per_file() -> None:
    for lane, modules in VLLM_LANES.items():
        assert {unit_of(f"{m}::test_x[a]") for m in modules} == {lane}
    assert sum(len(modules) for modules in VLLM_LANES.values()) == len(VLLM_MODULES)  # in one lane each
    assert unit_of("tests/policy/test_policy_gates.py::test_x[a::b]") == "tests/policy/test_policy_gates.py"
    assert unit_of("tests/test_cli.py::Test::test_y") == "tests/test_cli.py"


def test_the_serve_sim_modules_start_no_vllm() -> None:
    for module in sorted(SERVE_SIM_MODULES):
        text = (ROOT / module).read_text()
        assert "serve_sim_processes" in text and "VllmServer" not in text, module
        assert not re.search(r"\b(" + "|".join(sorted(TINY_MODEL_FIXTURES)) + r")\b", text), module
        assert unit_of(f"{module}::test_x") == module


def test_the_shared_servers_modules_are_in_one_lane() -> None:
    sharing = {m for m in VLLM_MODULES if re.search(r"\btiny_vllm\b", (ROOT / m).read_text())}
    assert sharing and len({unit_of(f"{m}::t") for m in sharing}) == 1, sharing
