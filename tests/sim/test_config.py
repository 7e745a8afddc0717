"""Engine settings are validated as vLLM validates them."""

from __future__ import annotations

import pytest

from flatshare.errors import InputError
from flatshare.sim.config import EngineConfig, fitting_model_len


def test_max_model_len_must_leave_vllms_null_block() -> None:
    assert fitting_model_len(2048, 32) == 63 * 32
    EngineConfig(kv_tokens=2048, block_size=32, max_model_len=63 * 32)
    with pytest.raises(InputError, match="null block"):
        EngineConfig(kv_tokens=2048, block_size=32, max_model_len=2048)


def test_unknown_keys_are_named() -> None:
    with pytest.raises(InputError, match="unknown key"):
        EngineConfig.from_dict({"kv_token": 100})
