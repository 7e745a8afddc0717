"""Builders for simulator tests: requests with token streams, and a one-call engine run."""

from __future__ import annotations

from flatshare.sim.config import EngineConfig, fitting_model_len
from flatshare.sim.engine import SimEngine, SimResult
from flatshare.sim.profile import load_profile
from flatshare.sim.requests import SimRequest
from flatshare.sim.tokens import TokenStreams

_STREAMS = TokenStreams(seed=1)


def req(
    rid: str, arrival: float, prompt: int, out: int, priority: int = 0, group: str | None = None
) -> SimRequest:
    ids = _STREAMS.take(f"group:{group}" if group else f"request:{rid}", prompt)
    return SimRequest(rid, arrival, tuple(ids), out, priority, "voice" if priority == 0 else "agent")


def run(requests: list[SimRequest], **config: object) -> SimResult:
    kv = int(config.get("kv_tokens", EngineConfig.kv_tokens))  # type: ignore[call-overload]
    config.setdefault("max_model_len", fitting_model_len(kv, 16))
    engine = SimEngine(EngineConfig(**config), load_profile())  # type: ignore[arg-type]
    return engine.run(requests)


def by_id(result: SimResult) -> dict[str, object]:
    return {r.id: r for r in result.records}
