"""The baselines' settings: frozen, validated, unknown keys an error; the commands' `--additional-config`
checked for the chosen scheduler in one line; every flatshare scheduler reachable by its alias."""

from __future__ import annotations

import dataclasses

import pytest

from flatshare.errors import InputError
from flatshare.scheduler.reserve_config import ReserveConfig, ReserveConfigError
from flatshare.scheduler.sage_config import SageConfigError
from flatshare.scheduler.sglang_config import SglangPreemptConfig, SglangPreemptConfigError
from flatshare.sim.config import SCHEDULER_ALIASES, SCHEDULER_CONFIG_KEYS, EngineConfig
from flatshare.sim.options import EngineOptions, additional_config

pytestmark = pytest.mark.vllm  # checking a section imports the scheduler package


def test_absent_sections_are_disabled_defaults() -> None:
    assert SglangPreemptConfig.from_additional_config(None) == SglangPreemptConfig()
    assert not SglangPreemptConfig().enabled and SglangPreemptConfig().threshold == 10
    assert ReserveConfig.from_additional_config({"make_room": {"enabled": True}}) == ReserveConfig()


@pytest.mark.parametrize(
    ("cls", "error", "section", "message"),
    [
        (
            SglangPreemptConfig,
            SglangPreemptConfigError,
            {"threshold": -1},
            "threshold must be an integer >= 0",
        ),
        (SglangPreemptConfig, SglangPreemptConfigError, {"threshold": 1.5}, "threshold"),
        (SglangPreemptConfig, SglangPreemptConfigError, {"enabled": "yes"}, "enabled must be true or false"),
        (SglangPreemptConfig, SglangPreemptConfigError, {"thresold": 3}, r"unknown key\(s\) \['thresold'\]"),
        (
            ReserveConfig,
            ReserveConfigError,
            {"reserve_tokens": -16},
            "reserve_tokens must be an integer >= 0",
        ),
        (
            ReserveConfig,
            ReserveConfigError,
            {"protect_priority": True},
            "protect_priority must be an integer",
        ),
        (ReserveConfig, ReserveConfigError, {"tokens": 4096}, r"unknown key\(s\) \['tokens'\]"),
    ],
)
def test_bad_settings_are_one_clear_error(
    cls: type, error: type, section: dict[str, object], message: str
) -> None:
    key = "sglang_preempt" if cls is SglangPreemptConfig else "reserve"
    with pytest.raises(error, match=message):
        cls.from_additional_config({key: section})
    with pytest.raises(error, match="must be a JSON object"):
        cls.from_additional_config({key: [1]})


def test_configs_are_frozen() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        ReserveConfig().reserve_tokens = 1  # type: ignore[misc]


def test_every_flatshare_alias_has_a_key_and_a_class() -> None:
    assert set(SCHEDULER_CONFIG_KEYS) == set(SCHEDULER_ALIASES) - {"vllm"}
    assert (
        EngineConfig(scheduler="sglang-preempt").scheduler_path
        == "flatshare.scheduler.SglangPreemptScheduler"
    )
    assert EngineConfig(scheduler="reserve").scheduler_path == "flatshare.scheduler.ReserveScheduler"


def test_the_additional_config_option_is_checked_for_the_chosen_scheduler() -> None:
    text = '{"sglang_preempt": {"enabled": true, "threshold": 5}}'
    config, _ = EngineOptions(scheduler="sglang-preempt", additional_config=text).build()
    assert config.additional_config == {"sglang_preempt": {"enabled": True, "threshold": 5}}
    with pytest.raises(
        InputError, match=r"^--additional-config: sglang_preempt: unknown key\(s\) \['window'\]"
    ):
        additional_config("sglang-preempt", '{"sglang_preempt": {"window": 5}}')
    with pytest.raises(InputError, match="'reserve' is reserve's section; --scheduler sglang-preempt reads"):
        additional_config("sglang-preempt", '{"reserve": {"enabled": true}}')
    with pytest.raises(InputError, match="--scheduler vllm reads no flatshare settings"):
        additional_config("vllm", '{"make_room": {"enabled": true}}')
    with pytest.raises(InputError, match="not valid JSON"):
        additional_config("reserve", "{reserve")
    with pytest.raises(InputError, match="must be a JSON object"):
        additional_config("reserve", "[1]")
    with pytest.raises(InputError, match="given twice"):
        additional_config("make-room", '{"make_room": {}}', make_room='{"enabled": true}')
    assert additional_config("make-room", make_room='{"enabled": true}') == {"make_room": {"enabled": True}}
    unchecked = additional_config("my.module.Scheduler", '{"anything": 1, "reserve": {"x": 1}}')
    assert unchecked == {"anything": 1, "reserve": {"x": 1}}  # a dotted path's plug-ins may read any key


def test_make_rooms_own_settings_are_checked_as_well() -> None:
    with pytest.raises(InputError, match=r"make_room: unknown key\(s\) \['window'\]"):
        EngineOptions(scheduler="make-room", make_room='{"window": 4}').build()


# Each engine-side baseline as make-room builds itself: (alias, its additional_config key, the class
# path's module, the error its settings raise, the async class's name).
BASELINES = [
    ("reserve", "reserve", "flatshare.scheduler.base", ReserveConfigError, "AsyncReserveScheduler"),
    (
        "sglang-preempt",
        "sglang_preempt",
        "flatshare.scheduler.base",
        SglangPreemptConfigError,
        "AsyncSglangPreemptScheduler",
    ),
    ("sage", "sage", "flatshare.scheduler.base", SageConfigError, "AsyncSageScheduler"),
]


def _engine_config(alias: str, key: str, **settings: object) -> EngineConfig:
    return EngineConfig(scheduler=alias, additional_config={key: {"enabled": True, **settings}})


@pytest.mark.parametrize(("alias", "key", "module", "error", "async_name"), BASELINES)
def test_an_untested_vllm_version_is_refused_unless_allowed(
    monkeypatch: pytest.MonkeyPatch,
    alias: str,
    key: str,
    module: str,
    error: type[Exception],
    async_name: str,
) -> None:
    import importlib

    from flatshare.sim.engine import SimEngine
    from flatshare.sim.profile import load_profile

    monkeypatch.delenv("FLATSHARE_ALLOW_UNTESTED_VLLM", raising=False)
    monkeypatch.setattr(importlib.import_module(module), "installed_vllm_version", lambda: "0.29.1")
    with pytest.raises(error, match=rf"{alias} is tested with vLLM .* not 0\.29\.1"):
        SimEngine(_engine_config(alias, key), load_profile())
    SimEngine(_engine_config(alias, key, allow_untested_vllm=True), load_profile())


@pytest.mark.parametrize("async_scheduling", [False, True])
@pytest.mark.parametrize(("alias", "key", "module", "error", "async_name"), BASELINES)
def test_the_one_class_name_follows_vllms_scheduling_mode(
    async_scheduling: bool, alias: str, key: str, module: str, error: type[Exception], async_name: str
) -> None:
    from vllm.v1.core.sched.async_scheduler import AsyncScheduler

    import flatshare.scheduler
    from flatshare.sim.engine import SimEngine
    from flatshare.sim.profile import load_profile

    config = dataclasses.replace(_engine_config(alias, key), async_scheduling=async_scheduling)
    scheduler = SimEngine(config, load_profile()).scheduler
    assert isinstance(scheduler, getattr(flatshare.scheduler, SCHEDULER_ALIASES[alias].rsplit(".", 1)[1]))
    assert isinstance(scheduler, AsyncScheduler) == async_scheduling
    assert isinstance(scheduler, getattr(flatshare.scheduler, async_name)) == async_scheduling
