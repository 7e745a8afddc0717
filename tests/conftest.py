"""Shared test helpers. vLLM is imported once per test process (about 9 s here)."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
TRACES = SHARED / "traces"


@pytest.fixture(scope="session")
def traces_dir() -> Path:
    if not TRACES.is_dir():
        pytest.fail(f"../shared/traces must lie beside the checkout (looked in {TRACES})")
    return TRACES
