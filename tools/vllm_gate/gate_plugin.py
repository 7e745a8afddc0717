"""pytest plugin: run vLLM's own scheduler tests with make-room in place of vLLM's scheduler classes.

Loaded by `run.py` with `-p gate_plugin` into a pytest session over the `tests/` of a vLLM release sdist.
Two jobs, both driven by environment variables:

- `VLLM_GATE_MODE` (`stock`, `disabled`, `enabled`, `hold-decode`; `no-hold` for diagnosis): unless
  `stock`, every test-side module (`tests.*`) that bound the names `Scheduler` / `AsyncScheduler` to
  vLLM's classes gets them rebound to make-room subclasses that put the mode's `make_room` settings into
  `vllm_config.additional_config` before vLLM's constructor runs. vLLM's files are not edited; factories
  such as `tests/v1/core/utils.py:create_scheduler` and direct `Scheduler(...)` calls in test files look
  the names up at call time, so they build make-room. The swap runs after collection (all test modules
  imported) and again before each test (helper modules imported lazily).
- `VLLM_GATE_OUTCOMES`: path of a JSON file written at the end of the session, one entry per test id:
  `{"outcome": passed|failed|error|skipped|xfailed|xpassed, "message": the failure's first lines,
  "seconds": time spent}`, plus `"swapped"`: the names rebound, and `"built"`: make-room schedulers
  constructed, by class.
- `VLLM_GATE_DESELECT` (optional): path of a file of test ids, one a line, not to run (the runner lists
  tests that failed in `stock` for want of something this machine lacks).
"""

from __future__ import annotations

import json
import os
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

MODES: dict[str, dict[str, Any] | None] = {
    "stock": None,
    "disabled": {"enabled": False},
    "enabled": {"enabled": True},
    "hold-decode": {"enabled": True, "hold_decode": True},
    # Diagnostic only (not gated): preemption for the waiting without the hold window, to tell which of
    # make-room's two mechanisms makes a test differ.
    "no-hold": {"enabled": True, "window_tokens": 0},
}
GATED_MODES = ("stock", "disabled", "enabled", "hold-decode")

_outcomes: dict[str, dict[str, Any]] = {}
_built: Counter[str] = Counter()
_swapped: set[str] = set()
_replacements: dict[type, type] = {}


def _mode() -> str:
    mode = os.environ.get("VLLM_GATE_MODE", "stock")
    if mode not in MODES:
        raise pytest.UsageError(f"VLLM_GATE_MODE={mode!r}; expected one of {sorted(MODES)}")
    return mode


def _with_settings(base: Any, settings: dict[str, Any]) -> type:
    """A subclass of a make-room scheduler class that injects `settings` as `make_room`."""

    class Gate(base):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            vllm_config = kwargs["vllm_config"] if "vllm_config" in kwargs else args[0]
            extra = dict(vllm_config.additional_config or {})
            extra["make_room"] = dict(settings)
            vllm_config.additional_config = extra
            super().__init__(*args, **kwargs)
            _built[type(self).__name__] += 1

    Gate.__name__ = Gate.__qualname__ = f"Gate{base.__name__}"
    return Gate


def _build_replacements(settings: dict[str, Any]) -> dict[type, type]:
    from vllm.v1.core.sched.async_scheduler import AsyncScheduler
    from vllm.v1.core.sched.scheduler import Scheduler

    from flatshare.scheduler import AsyncMakeRoomScheduler, MakeRoomScheduler

    return {
        Scheduler: _with_settings(MakeRoomScheduler, settings),
        AsyncScheduler: _with_settings(AsyncMakeRoomScheduler, settings),
    }


def _swap_names() -> None:
    """Rebind vLLM's scheduler classes in every imported `tests.*` module's namespace."""
    for name, module in list(sys.modules.items()):
        if module is None or not (name == "tests" or name.startswith("tests.")):
            continue
        namespace = vars(module)
        for attr, value in list(namespace.items()):
            replacement = _replacements.get(value) if isinstance(value, type) else None
            if replacement is not None:
                namespace[attr] = replacement
                _swapped.add(f"{name}.{attr}")


def pytest_configure(config: pytest.Config) -> None:
    settings = MODES[_mode()]
    if settings is not None:
        _replacements.update(_build_replacements(settings))


def pytest_report_header(config: pytest.Config) -> str:
    mode = _mode()
    return f"vllm-gate: mode={mode} make_room={json.dumps(MODES[mode])}"


def pytest_collection_modifyitems(
    session: pytest.Session, config: pytest.Config, items: list[pytest.Item]
) -> None:
    if _replacements:
        _swap_names()
    listing = os.environ.get("VLLM_GATE_DESELECT")
    if listing:
        skip = set(Path(listing).read_text().split())
        config.hook.pytest_deselected(items=[item for item in items if item.nodeid in skip])
        items[:] = [item for item in items if item.nodeid not in skip]


def pytest_runtest_setup(item: pytest.Item) -> None:
    if _replacements:
        _swap_names()


def _message(report: pytest.CollectReport | pytest.TestReport) -> str:
    """The failure's first two lines (an exception's second line often names the cause)."""
    crash = getattr(report.longrepr, "reprcrash", None)
    text = crash.message if crash is not None else str(report.longrepr or "")
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return " | ".join(lines[:2])[:400]


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    entry = _outcomes.setdefault(report.nodeid, {"outcome": "passed", "message": "", "seconds": 0.0})
    entry["seconds"] = round(entry["seconds"] + report.duration, 3)
    if report.when == "call":
        if hasattr(report, "wasxfail"):
            entry["outcome"] = "xfailed" if report.skipped else "xpassed"
        elif report.outcome != "passed":
            entry.update(outcome=report.outcome, message=_message(report))
    elif report.skipped and entry["outcome"] == "passed":
        entry.update(outcome="skipped", message=_message(report))
    elif report.failed and entry["outcome"] in ("passed", "skipped"):
        entry.update(outcome="error", message=f"{report.when}: {_message(report)}")


def pytest_collectreport(report: pytest.CollectReport) -> None:
    if report.failed:
        _outcomes[report.nodeid or "<session>"] = {"outcome": "error", "message": _message(report)}


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    path = os.environ.get("VLLM_GATE_OUTCOMES")
    if not path:
        return
    data = {
        "mode": _mode(),
        "exitstatus": int(exitstatus),
        "swapped": sorted(_swapped),
        "built": dict(_built),
        "tests": _outcomes,
    }
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
