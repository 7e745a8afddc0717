from __future__ import annotations

import pytest

from flatshare.workloads.synth import long_short


def test_one_long_and_ten_short() -> None:
    w = long_short(seed=0)
    requests = list(w.requests())
    longs = [r for r in requests if r.cls == "long"]
    shorts = [r for r in requests if r.cls == "short"]
    assert len(longs) == 1 and len(shorts) == 10 and len(w.sessions) == 11
    assert longs[0].prompt_tokens == 50_000 and longs[0].arrival_s == 0.0
    assert all(100 <= r.prompt_tokens <= 500 and 1 <= r.max_tokens <= 256 for r in shorts)
    assert all(0.0 <= (r.arrival_s or 0.0) <= 0.5 for r in shorts)
    assert len({r.prompt_token_ids[:16] for r in requests}) == 11  # nothing shared


def test_seed_and_options() -> None:
    assert long_short(seed=4) == long_short(seed=4)
    assert long_short(seed=4) != long_short(seed=5)
    w = long_short(60_000, 3, seed=1, short_max_tokens=64, jitter_s=0.0, max_model_len=32_768)
    requests = list(w.requests())
    assert all(r.arrival_s == 0.0 for r in requests)
    assert all(r.prompt_tokens + r.max_tokens <= 32_768 for r in requests)
    assert max(r.max_tokens for r in requests if r.cls == "short") <= 64
    with pytest.raises(ValueError, match="short_max_tokens"):
        long_short(short_max_tokens=512)
