"""How `make test` splits the suite over pytest-xdist workers (`-n 2 --dist loadfile`): one unit of work per
test module (its module fixtures set up once), except the modules that start real vLLM servers or build tiny
models, which form two units, the lanes of `VLLM_LANES`, each run in order by one worker: one vLLM server at
a time in a lane, the shared server's modules in one lane one after another (`tests/conftest.py`). The
lanes are handed out first, one to each worker (they are the longest units; xdist would order units by
their number of tests, which put the docs tests' unit first and started the vLLM unit minutes late); the
other modules fill in as a worker frees up.

Lanes, balanced by a run with one vLLM unit (seconds, two workers, load average 7-12): `vllm-a` the
fidelity test (278 setup), make-room's memory and seat servers (182 + 99), its at-risk server (added
later, not in this balance), the shared server's modules (about 110); `vllm-b` the pin server (152), the co-location real runs (158 + 104), the operator journey
(111), the keyed, sage and tiny-model modules (62 + 36 + 15). One lane alone was the whole run's length
(22:10 of 22:10, the other worker done long before). With the two lanes at load average 4-11: 1561
passed in 22:33, no faster on that loaded machine (each server test 10-60% slower beside the other
lane's server, and the other modules waited for a lane to end); at most two vLLM servers run at once.

The vLLM modules are listed: xdist's scheduler sees only test ids, not markers or fixtures.
`undeclared_vllm_modules` finds a collected module that has a `server` test or uses a tiny-model fixture
but is in no lane (`SERVE_SIM_MODULES` lists the `server` modules that start only serve-sim processes,
which run as their own units); conftest refuses such a run. (pytest-xdist 3.8's own `--dist loadgroup`
does not group under pytest 9.2: it renames `item._nodeid`, which pytest 9.2 no longer reads.)
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pytest

VLLM_LANES: dict[str, frozenset[str]] = {
    "vllm-a": frozenset(
        {
            "tests/fidelity/test_fidelity_server.py",
            "tests/scheduler/test_make_room_server.py",
            "tests/scheduler/test_make_room_pace_server.py",
            "tests/gateway/test_gateway_vllm.py",  # the shared server's three modules
            "tests/replay/test_replay_vllm_server.py",
            "tests/testing/test_vllm_server.py",
        }
    ),
    "vllm-b": frozenset(
        {
            "tests/scheduler/test_make_room_pin_server.py",
            "tests/colocation/test_colocation_real.py",
            "tests/test_docs_journey.py",
            "tests/gateway/test_gateway_vllm_key.py",
            "tests/scheduler/test_sage_server.py",
            "tests/testing/test_tiny_model.py",
        }
    ),
}
VLLM_MODULES = frozenset().union(*VLLM_LANES.values())
_LANE_OF = {module: lane for lane, modules in VLLM_LANES.items() for module in modules}
SERVE_SIM_MODULES = frozenset({"tests/admission/test_admission_endpoint.py"})
"""Modules with `server` tests that start only `flatshare serve-sim` processes (no vLLM, no tiny model):
each its own unit, like any other module."""
TINY_MODEL_FIXTURES = frozenset({"tiny_models", "tiny_model", "tiny_vllm"})


def module_of(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def unit_of(nodeid: str) -> str:
    """The unit of work a test belongs to: its vLLM lane, or its module."""
    module = module_of(nodeid)
    return _LANE_OF.get(module, module)


def needs_vllm_group(item: pytest.Item) -> bool:
    """Whether the test starts a real server (`server`) or uses a tiny model."""
    fixtures = set(getattr(item, "fixturenames", ()))
    return item.get_closest_marker("server") is not None or bool(TINY_MODEL_FIXTURES & fixtures)


def undeclared_vllm_modules(items: Iterable[pytest.Item]) -> set[str]:
    """Modules among `items` that belong in a vLLM lane and are in none (nor in `SERVE_SIM_MODULES`)."""
    return (
        {module_of(item.nodeid) for item in items if needs_vllm_group(item)}
        - VLLM_MODULES
        - SERVE_SIM_MODULES
    )


def vllm_group_scheduling(config: pytest.Config, log: Any) -> Any:
    """xdist's file scheduling with the vLLM modules joined into their lanes (imported only under xdist)."""
    from xdist.scheduler import LoadFileScheduling

    class VllmGroupScheduling(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return unit_of(nodeid)

        def _assign_work_unit(self, node: Any) -> None:
            """The vLLM lanes first (module docstring)."""
            for lane in reversed(VLLM_LANES):
                if lane in self.workqueue:
                    self.workqueue.move_to_end(lane, last=False)
            super()._assign_work_unit(node)

    return VllmGroupScheduling(config, log)
