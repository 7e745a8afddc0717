"""make-room says at start-up that it is on, and warns once when the traffic has no classes to act between."""

from __future__ import annotations

import logging

import pytest

from flatshare.scheduler.classes import WARN_AFTER, ClassMix
from flatshare.sim.config import EngineConfig
from flatshare.sim.engine import SimEngine
from flatshare.sim.profile import load_profile
from simkit import req


def test_untagged_traffic_is_all_protected_and_warned_about_once() -> None:
    mix = ClassMix(protect_priority=0)
    warnings = [mix.add(0) for _ in range(WARN_AFTER * 2)]
    said = [w for w in warnings if w is not None]
    assert len(said) == 1 and "every request is protected" in said[0]
    assert warnings.index(said[0]) == WARN_AFTER - 1


def test_nothing_protected_is_warned_about() -> None:
    mix = ClassMix(protect_priority=0)
    said = [w for w in (mix.add(10) for _ in range(WARN_AFTER)) if w]
    assert len(said) == 1 and "nothing is protected" in said[0]


def test_a_mix_of_classes_is_never_warned_about() -> None:
    mix = ClassMix(protect_priority=0)
    assert not [w for w in (mix.add(10 * (i % 5 == 0)) for i in range(WARN_AFTER * 3)) if w]


@pytest.mark.vllm
def test_the_scheduler_logs_its_settings_and_the_warning(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="flatshare.scheduler.make_room")
    config = EngineConfig(
        scheduler="make-room", additional_config={"make_room": {"enabled": True, "window_tokens": 16}}
    )
    engine = SimEngine(config, load_profile())
    assert any("make-room: on, max_victims=2 window_tokens=16" in r.getMessage() for r in caplog.records)
    engine.run([req(f"r{i}", 0.001 * i, 16, 1, priority=0) for i in range(WARN_AFTER)])
    warned = [r for r in caplog.records if r.levelno == logging.WARNING and "protected" in r.getMessage()]
    assert len(warned) == 1
