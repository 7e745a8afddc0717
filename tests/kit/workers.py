"""How `make test` splits the suite over pytest-xdist workers (`-n 2 --dist loadfile`): one unit of work per
test module (its module fixtures set up once), except the modules that start real vLLM servers or build tiny
models, which form one unit, `VLLM_GROUP`, run in order by one worker: one vLLM server at a time, as in a
serial run (the shared server's modules still one after another, `tests/conftest.py`), and each tiny model
built once, while the other worker runs the rest.

The vLLM modules are listed (`VLLM_MODULES`): xdist's scheduler sees only test ids, not markers or
fixtures. `undeclared_vllm_modules` finds a collected module that has a `server` test or uses a tiny-model
fixture but is not listed (`SERVE_SIM_MODULES` lists the `server` modules that start only serve-sim
processes, which run as their own units); conftest refuses such a run, so a new server module cannot silently run beside
another server. (pytest-xdist 3.8's own `--dist loadgroup` does not group under pytest 9.2: it renames
`item._nodeid`, which pytest 9.2 no longer reads.)
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pytest

VLLM_GROUP = "vllm"
VLLM_MODULES = frozenset(
    {
        "tests/colocation/test_colocation_real.py",
        "tests/fidelity/test_fidelity_server.py",
        "tests/gateway/test_gateway_vllm.py",
        "tests/gateway/test_gateway_vllm_key.py",
        "tests/replay/test_replay_vllm_server.py",
        "tests/scheduler/test_make_room_pin_server.py",
        "tests/scheduler/test_make_room_server.py",
        "tests/scheduler/test_sage_server.py",
        "tests/test_docs_journey.py",
        "tests/testing/test_tiny_model.py",
        "tests/testing/test_vllm_server.py",
    }
)
SERVE_SIM_MODULES = frozenset({"tests/admission/test_admission_endpoint.py"})
"""Modules with `server` tests that start only `flatshare serve-sim` processes (no vLLM, no tiny model):
each its own unit, like any other module."""
TINY_MODEL_FIXTURES = frozenset({"tiny_models", "tiny_model", "tiny_vllm"})


def module_of(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def unit_of(nodeid: str) -> str:
    """The unit of work a test belongs to: `VLLM_GROUP` or its module."""
    module = module_of(nodeid)
    return VLLM_GROUP if module in VLLM_MODULES else module


def needs_vllm_group(item: pytest.Item) -> bool:
    """Whether the test starts a real server (`server`) or uses a tiny model."""
    fixtures = set(getattr(item, "fixturenames", ()))
    return item.get_closest_marker("server") is not None or bool(TINY_MODEL_FIXTURES & fixtures)


def undeclared_vllm_modules(items: Iterable[pytest.Item]) -> set[str]:
    """Modules among `items` that belong in `VLLM_MODULES` and are not there (nor in `SERVE_SIM_MODULES`)."""
    return (
        {module_of(item.nodeid) for item in items if needs_vllm_group(item)}
        - VLLM_MODULES
        - SERVE_SIM_MODULES
    )


def vllm_group_scheduling(config: pytest.Config, log: Any) -> Any:
    """xdist's file scheduling with the vLLM modules joined into one unit (imported only under xdist)."""
    from xdist.scheduler import LoadFileScheduling

    class VllmGroupScheduling(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return unit_of(nodeid)

        def _assign_work_unit(self, node: Any) -> None:
            """The vLLM unit first: it is the longest (xdist orders units by their number of tests)."""
            if VLLM_GROUP in self.workqueue:
                self.workqueue.move_to_end(VLLM_GROUP, last=False)
            super()._assign_work_unit(node)

    return VllmGroupScheduling(config, log)
