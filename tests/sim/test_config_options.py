"""The commands' engine options: one default each (`EngineConfig`'s), turned into a config in one place."""

from __future__ import annotations

import dataclasses

import pytest

from flatshare.errors import InputError
from flatshare.sim.config import DEFAULT_ENGINE, EngineConfig
from flatshare.sim.options import EngineOptions, make_room_settings


def test_option_defaults_are_the_configs_except_the_derived_ones() -> None:
    options = EngineOptions()
    derived = {"profile": "", "kv_tokens": 0, "max_model_len": 0, "make_room": "", "additional_config": ""}
    for field in dataclasses.fields(EngineOptions):
        expected = derived.get(field.name, getattr(DEFAULT_ENGINE, field.name, None))
        assert getattr(options, field.name) == expected, field.name
    assert EngineConfig() == DEFAULT_ENGINE


def test_zeros_are_filled_from_the_profile_and_the_kv_cache() -> None:
    config, profile = EngineOptions(kv_tokens=0, max_model_len=0, block_size=32).build()
    assert config.kv_tokens == profile.default_kv_tokens
    assert config.max_model_len == min(32768, (config.kv_tokens // 32 - 1) * 32)


def test_make_room_settings_must_be_a_json_object() -> None:
    config, _ = EngineOptions(scheduler="make-room", make_room='{"enabled": true}').build()
    assert config.additional_config == {"make_room": {"enabled": True}}
    with pytest.raises(InputError, match="not valid JSON"):
        make_room_settings("{enabled")
    with pytest.raises(InputError, match="JSON object"):
        make_room_settings("[1]")


def test_bad_values_raise_input_error() -> None:
    with pytest.raises(InputError, match="policy"):
        EngineOptions(policy="lifo").build()
