"""`SimEngine.warm_up`: requests served before the run, which leave only the caches behind."""

from __future__ import annotations

import pytest

from flatshare.sim.config import EngineConfig, fitting_model_len
from flatshare.sim.engine import SimEngine
from flatshare.sim.profile import load_profile
from flatshare.sim.requests import SimRequest
from simkit import req

pytestmark = pytest.mark.vllm

SYSTEM = 4000


def engine(**config: object) -> SimEngine:
    config.setdefault("max_model_len", fitting_model_len(EngineConfig.kv_tokens, 16))
    return SimEngine(EngineConfig(**config), load_profile())  # type: ignore[arg-type]


def turn(arrival: float = 1.0) -> SimRequest:
    """A voice turn: the shared 4,000-token system prompt and 100 tokens of its own."""
    system = req("system", 0.0, SYSTEM, 1, group="voice-system").prompt_token_ids
    own = req("own", 0.0, 100, 1).prompt_token_ids
    return SimRequest("turn", arrival, (*system, *own), 20, 0, "voice")


def warmup() -> SimRequest:
    return req("warmup", 0.0, SYSTEM, 1, group="voice-system")


@pytest.mark.parametrize("cpu_tier_tokens", [0, 65536])
def test_a_warmed_prefix_makes_the_first_turn_a_cache_hit(cpu_tier_tokens: int) -> None:
    cold = engine(cpu_tier_tokens=cpu_tier_tokens).run([turn()])
    warmed = engine(cpu_tier_tokens=cpu_tier_tokens)
    assert warmed.warm_up([warmup()]) > 0
    assert (warmed.now, warmed.steps, warmed.records) == (0.0, 0, {})
    result = warmed.run([turn()])
    assert [r.id for r in result.records] == ["turn"]
    cold_ttft, warm_ttft = cold.records[0].ttft_s, result.records[0].ttft_s
    assert cold_ttft is not None and warm_ttft is not None
    assert warm_ttft < cold_ttft / 3  # 100 tokens to prefill instead of 4,100
    assert result.samples[0].t == 0.0  # samples start with the run, not the warm-up


def test_warm_up_needs_a_fresh_engine_and_time_to_finish() -> None:
    used = engine()
    used.run([req("r", 0.0, 10, 2)])
    with pytest.raises(ValueError, match="fresh engine"):
        used.warm_up([warmup()])
    with pytest.raises(ValueError, match=r"did not end 0\.01 s before the run"):
        engine().warm_up([warmup()], lead_s=0.01)
