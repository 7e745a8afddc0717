"""Shared test helpers. vLLM is imported once per test process (about 9 s here).

Session fixtures (tests/kit/shared_vllm.py): the tiny model built once per shape, and one real vLLM
server shared by the modules that use `tiny_vllm`. Those modules run one after another (at the place of
the first of them) and the server stops right after the last of their tests, by its process group.

Under pytest-xdist (`make test`: `-n 2 --dist loadfile`) the modules that start vLLM servers or build
tiny models run in two lanes, each in order on one worker (the shared server's modules in one lane), the
rest as a worker frees up (tests/kit/workers.py).
"""

from __future__ import annotations

from collections.abc import Generator, Iterator
from pathlib import Path
from typing import Any

import pytest

from flatshare.testing.vllm_server import VllmServer
from kit.shared_vllm import SHARED_FIXTURE, SharedServer, TinyModels
from kit.workers import undeclared_vllm_modules, vllm_group_scheduling

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
TRACES = SHARED / "traces"

_SHARED_SERVER = pytest.StashKey[SharedServer]()
_SHARING_MODULES = pytest.StashKey[frozenset[str]]()


@pytest.fixture(scope="session")
def traces_dir() -> Path:
    if not TRACES.is_dir():
        pytest.fail(f"../shared/traces must lie beside the checkout (looked in {TRACES})")
    return TRACES


@pytest.fixture(scope="session")
def tiny_models(tmp_path_factory: pytest.TempPathFactory) -> TinyModels:
    """Tiny models, each shape built once this session (`tiny_models.get(max_position_embeddings=...)`)."""
    return TinyModels(tmp_path_factory.mktemp("tiny-models"))


@pytest.fixture(scope="session")
def tiny_model(tiny_models: TinyModels) -> Path:
    """The default tiny model (vocab 512, 4096 positions), built once this session."""
    return tiny_models.get()


@pytest.fixture(scope="session")
def _shared_server(
    request: pytest.FixtureRequest, tiny_models: TinyModels, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[SharedServer]:
    shared = SharedServer(tiny_models, tmp_path_factory.mktemp("tiny-vllm-log"))
    request.config.stash[_SHARED_SERVER] = shared
    try:
        yield shared
    finally:
        shared.stop()


@pytest.fixture(scope="module")
def tiny_vllm(_shared_server: SharedServer) -> VllmServer:
    """The shared vLLM CPU server (kit.shared_vllm.SHARED_SETTINGS), started on first use."""
    return _shared_server.get()


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """`--dist loadfile` with the vLLM modules in their lanes (tests/kit/workers.py); other modes as xdist has
    them."""
    return vllm_group_scheduling(config, log) if config.getvalue("dist") == "loadfile" else None


@pytest.hookimpl(tryfirst=True)  # before `-m`/`-k` deselect: every collected test is checked
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Refuse a run where a module that starts vLLM servers is in no vLLM lane
    (tests/kit/workers.py); run the modules that use the shared server one after another, at the place of
    the first of them, each module's tests in their own order (module fixtures are still set up once)."""
    undeclared = undeclared_vllm_modules(items)
    if undeclared:
        raise pytest.UsageError(
            f"add {', '.join(sorted(undeclared))} to a lane of VLLM_LANES in tests/kit/workers.py: its tests "
            "start vLLM servers or build tiny models, which run in lanes, one server at a time in a lane"
        )
    modules = {_module(item) for item in items if SHARED_FIXTURE in getattr(item, "fixturenames", ())}
    config.stash[_SHARING_MODULES] = frozenset(m for m in modules if m is not None)
    if not modules:
        return
    first = next(i for i, item in enumerate(items) if _module(item) in modules)
    moved = [item for item in items if _module(item) in modules]
    rest = [item for item in items if _module(item) not in modules]
    items[:] = rest[:first] + moved + rest[first:]


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Generator[None, None, None]:
    """After the last test of the last module that uses the shared server (and that module's fixtures) is
    torn down, stop the server."""
    try:
        return (yield)
    finally:
        sharing = item.config.stash.get(_SHARING_MODULES, frozenset())
        shared = item.config.stash.get(_SHARED_SERVER, None)
        if (
            shared is not None
            and _module(item) in sharing
            and (nextitem is None or _module(nextitem) not in sharing)
        ):
            shared.stop()


def _module(item: pytest.Item) -> str | None:
    """The test module's file (None for items without one)."""
    module = getattr(item, "module", None)
    return getattr(module, "__file__", None)
