"""A small simulated run: a voice turn arriving while two coding agents fill the KV cache.

It is the write-up's probe (the first source document's) on the simulated engine: the turn is sent after the agents' contexts
have filled the cache, on an engine with room to spare and on a full one, under vLLM's stock
scheduler and under make-room. It runs vLLM's real scheduler; nothing here is precomputed.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from flatshare import enginelog
from flatshare.sim.config import DEFAULT_ENGINE, EngineConfig, fitting_model_len
from flatshare.sim.engine import SimEngine
from flatshare.sim.output import write_result
from flatshare.sim.profile import DEFAULT_PROFILE, StepTimeProfile, load_profile
from flatshare.sim.requests import SimRequest
from flatshare.sim.tokens import TokenStreams

VOICE_ARRIVAL_S = 8.0


@dataclass(frozen=True)
class DemoCase:
    key: str
    kv_tokens: int
    scheduler: str
    additional_config: dict[str, object]


@dataclass(frozen=True)
class DemoRow:
    key: str
    voice_ttft_s: float
    voice_finish_s: float
    kv_at_arrival: float
    preemptions: int


_MAKE_ROOM: dict[str, object] = {"make_room": {"enabled": True, "window_tokens": 48}}
CASES = (
    DemoCase("roomy-cache-vllm", 40960, "vllm", {}),
    DemoCase("full-cache-vllm", 32400, "vllm", {}),
    DemoCase("full-cache-make-room", 32400, "make-room", _MAKE_ROOM),
)


def demo_requests(seed: int = 0) -> list[SimRequest]:
    streams = TokenStreams(seed)
    agents = [
        SimRequest(f"agent{i}", 0.0, tuple(streams.take(f"agent{i}", 16000)), 1500, 10, "agent")
        for i in range(2)
    ]
    voice = SimRequest("voice", VOICE_ARRIVAL_S, tuple(streams.take("voice", 600)), 30, 0, "voice")
    return [*agents, voice]


def run_case(case: DemoCase, profile: StepTimeProfile, out: Path, seed: int = 0) -> DemoRow:
    config = EngineConfig(
        kv_tokens=case.kv_tokens,
        max_model_len=fitting_model_len(case.kv_tokens, DEFAULT_ENGINE.block_size),
        scheduler=case.scheduler,
        additional_config=case.additional_config,
    )
    result = SimEngine(config, profile).run(demo_requests(seed))
    write_result(out / case.key, result, {"engine": config.to_json(), "profile": profile.name, "seed": seed})
    voice = next(r for r in result.records if r.id == "voice")
    kv = [s.kv_usage for s in result.samples if s.t <= VOICE_ARRIVAL_S][-1]
    return DemoRow(
        case.key, voice.ttft_s or 0.0, (voice.finish_s or 0.0) - voice.arrival_s, kv, result.preemptions
    )


def run_probe(out: Path, profile: str = "") -> tuple[StepTimeProfile, list[DemoRow]]:
    """Run every case of `CASES` with `profile` (a shipped name or a JSON file; "" the default) and
    write `out`/<case>/ and `out`/engine.log. InputError on a bad profile."""
    step_profile = load_profile(profile or DEFAULT_PROFILE)
    rows = [run_case(case, step_profile, out) for case in CASES]
    enginelog.log_to(out)
    return step_profile, rows
