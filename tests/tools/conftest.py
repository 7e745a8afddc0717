"""The scripts under `tools/` (not a package), loaded as modules for their tests."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest


def _load_tool(name: str) -> ModuleType:
    path = Path(__file__).parents[2] / "tools" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def seed_fit() -> ModuleType:
    """`tools/seed_fit.py`."""
    return _load_tool("seed_fit")


@pytest.fixture(scope="module")
def step_mix() -> ModuleType:
    """`tools/step_mix.py`."""
    return _load_tool("step_mix")


@pytest.fixture(scope="module")
def gpu_steps() -> ModuleType:
    """`tools/gpu_steps.py`."""
    return _load_tool("gpu_steps")


@pytest.fixture(scope="module")
def docs_layout() -> ModuleType:
    """`tools/docs_layout.py`."""
    return _load_tool("docs_layout")
