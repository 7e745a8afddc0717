"""One scheduler base and one registry: every alias the simulator, the CLI and the docs know is the
registry's; each flatshare scheduler's name, settings key, async variant and counters come from the base;
the vLLM internals the shared view reads are checked when an enabled scheduler is built; reserve's block
count and make-room's go through one call into vLLM."""

from __future__ import annotations

import dataclasses
import importlib
import re
from pathlib import Path
from typing import Any

import pytest

from flatshare.cli.engine_options import SchedulerOpt
from flatshare.schedulers import SCHEDULERS
from flatshare.sim.config import SCHEDULER_ALIASES, SCHEDULER_CONFIG_KEYS, EngineConfig
from flatshare.sim.engine import SimEngine
from flatshare.sim.profile import load_profile
from simkit import req

pytestmark = pytest.mark.vllm  # the scheduler classes import vLLM

DOCS = Path(__file__).resolve().parents[2] / "docs" / "baselines-engine.md"
FLATSHARE = [entry for entry in SCHEDULERS if entry.config_key is not None]


def _class(path: str) -> Any:
    module, _, name = path.rpartition(".")
    return getattr(importlib.import_module(module), name)


def _engine(alias: str, **settings: object) -> SimEngine:
    entry = next(e for e in SCHEDULERS if e.alias == alias)
    additional = {entry.config_key: {"enabled": True, **settings}} if entry.config_key else {}
    return SimEngine(
        EngineConfig(scheduler=alias, policy="priority", additional_config=additional), load_profile()
    )


def test_the_simulator_reads_the_registry() -> None:
    assert {e.alias: e.class_path for e in SCHEDULERS} == SCHEDULER_ALIASES
    assert {e.alias: e.config_key for e in FLATSHARE} == SCHEDULER_CONFIG_KEYS


def test_the_cli_help_names_every_alias() -> None:
    help_text = SchedulerOpt.__metadata__[0].help
    assert help_text.startswith(", ".join(e.alias for e in SCHEDULERS) + ", or a dotted")


def test_the_docs_alias_table_is_the_registry() -> None:
    rows = re.findall(r"^\| `([\w-]+)` \| `([\w.]+)` \| `(\w+)` \|$", DOCS.read_text(), re.MULTILINE)
    assert sorted(rows) == sorted((e.alias, e.class_path, e.config_key) for e in FLATSHARE)


@pytest.mark.parametrize("entry", FLATSHARE, ids=lambda e: e.alias)
def test_each_flatshare_scheduler_is_built_on_the_base_from_its_entry(entry: Any) -> None:
    import flatshare.scheduler
    from flatshare.scheduler.base import FlatshareScheduler

    cls = _class(entry.class_path)
    assert issubclass(cls, FlatshareScheduler) and cls.registry_entry() == entry
    assert cls.config_class is entry.load_config_class()
    async_cls = getattr(flatshare.scheduler, f"Async{cls.__name__}")
    assert cls.__dict__["_async_variant"] is async_cls and "_async_variant" not in async_cls.__dict__
    scheduler = _engine(entry.alias).scheduler
    counters = scheduler.flatshare_counters()
    assert set(counters) == {f.name for f in dataclasses.fields(cls.counters_class)}
    assert all(isinstance(value, int) for value in counters.values())


def test_stock_vllm_has_no_flatshare_counters() -> None:
    assert _engine("vllm").run([req("a", 0.0, 64, 4)]).scheduler_counters == {}


def test_an_enabled_scheduler_refuses_a_vllm_without_an_internal_the_view_reads(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from flatshare.scheduler import MakeRoomConfigError, ReserveConfigError, vllm_view

    assert vllm_view.missing_internals(_engine("make-room").scheduler) == []
    monkeypatch.setattr(vllm_view, "REQUIRED", (*vllm_view.REQUIRED, "_renamed_in_a_later_vllm"))
    with pytest.raises(MakeRoomConfigError, match=r"lacks the scheduler internals.*_renamed_in_a_later_vllm"):
        _engine("make-room")
    with pytest.raises(ReserveConfigError, match="_renamed_in_a_later_vllm"):
        _engine("reserve")
    _engine("make-room", enabled=False)  # disabled: vLLM's own behaviour, nothing of the view is read


@pytest.mark.parametrize("lookahead", [0, 3])
def test_reserve_and_make_room_count_a_requests_blocks_through_one_call(
    monkeypatch: pytest.MonkeyPatch, lookahead: int
) -> None:
    """make-room's prediction takes the lookahead from the scheduler, reserve from the `allocate_slots`
    call it wraps (vLLM passes the scheduler's there); given the same lookahead both make the same call."""
    from flatshare.scheduler import vllm_view

    sim = _engine("reserve")
    scheduler = sim.scheduler
    sim.submit(req("r", 0.0, 30, 4, priority=10))
    sim.step()  # admits it: vLLM counted its blocks
    request = scheduler.requests["r"]
    calls: list[dict[str, Any]] = []
    coordinator = scheduler.kv_cache_manager.coordinator
    count = coordinator.get_num_blocks_to_allocate

    def counted(**kwargs: Any) -> int:
        calls.append(kwargs)
        return int(count(**kwargs))

    monkeypatch.setattr(coordinator, "get_num_blocks_to_allocate", counted)
    monkeypatch.setattr(scheduler, "num_lookahead_tokens", lookahead)
    computed = request.num_computed_tokens
    empty = vllm_view._empty_groups(scheduler)
    view = vllm_view._blocks_for(scheduler, request, empty, computed, computed + 3, False)
    reserve = scheduler._step_blocks(request, 3, {"num_lookahead_tokens": lookahead})
    assert view == reserve
    hits = [call.pop("new_computed_blocks") for call in calls]
    assert len(calls) == 2 and calls[0] == calls[1] and not any(map(any, hits))  # no hits, same call
    assert calls[0]["num_tokens"] == computed + 3 + lookahead
