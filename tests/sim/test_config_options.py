"""The commands' engine options: one default each (`EngineConfig`'s), turned into a config in one place."""

from __future__ import annotations

import dataclasses

import pytest

from flatshare.errors import InputError
from flatshare.sim.config import DEFAULT_ENGINE, EngineConfig
from flatshare.sim.options import EngineOptions, make_room_settings


def test_option_defaults_are_the_configs_except_the_derived_ones() -> None:
    options = EngineOptions()
    derived = {
        "profile": "",
        "kv_tokens": None,
        "max_model_len": None,
        "make_room": "",
        "additional_config": "",
    }
    for field in dataclasses.fields(EngineOptions):
        expected = derived.get(field.name, getattr(DEFAULT_ENGINE, field.name, None))
        assert getattr(options, field.name) == expected, field.name
    assert EngineConfig() == DEFAULT_ENGINE


def test_what_is_left_none_is_filled_from_the_profile_and_the_kv_cache() -> None:
    config, profile = EngineOptions(block_size=32).build()
    assert config.kv_tokens == profile.default_kv_tokens
    assert config.max_model_len == min(DEFAULT_ENGINE.max_model_len, (config.kv_tokens // 32 - 1) * 32)


def test_the_profiles_kv_is_none_in_every_settings_class_and_zero_is_refused() -> None:
    from flatshare.colocation.setup import Setup

    assert Setup().kv_tokens is None and EngineOptions().kv_tokens is None
    assert Setup().kv_cache_tokens() == EngineOptions(profile=Setup().profile).build()[0].kv_tokens
    with pytest.raises(InputError, match="kv_tokens must be a positive integer, got 0"):
        EngineOptions(kv_tokens=0).build()
    with pytest.raises(ValueError, match="kv_tokens must be > 0"):
        Setup(kv_tokens=0)


def test_the_fitting_model_length_is_capped_at_the_engine_configs_default() -> None:
    from flatshare.sim.config import fitting_model_len

    assert fitting_model_len(10**6, 16) == DEFAULT_ENGINE.max_model_len == EngineConfig().max_model_len
    assert fitting_model_len(10**6, 16, cap=4096) == 4096


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
