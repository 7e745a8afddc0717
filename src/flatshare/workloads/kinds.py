"""The workloads a spec can name (`flatshare.workloads.spec`): each kind's builder, settings and defaults.

The agents of `voice-agents` and `agents` are generated (`agent_source=synthetic`, the default) or replay the
WEKA Claude Code sample's real sessions (`agent_source=weka`, file `agent_trace=PATH`, default
`DEFAULT_AGENT_TRACE`, a path from the project root); see `weka_agents`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from flatshare.workloads.model import Workload, merge
from flatshare.workloads.synth.agents import coding_agents
from flatshare.workloads.synth.long_short import long_short
from flatshare.workloads.synth.voice import VoiceProfile, voice_calls
from flatshare.workloads.traces import TraceOptions, load_azure, load_mooncake, load_sharegpt, load_weka
from flatshare.workloads.traces.sharegpt import SHORT_MAX_TOKENS
from flatshare.workloads.traces.weka_agents import weka_agents

DEFAULT_AGENT_TRACE = "../shared/traces/claude-code-weka-sample/sample_trace_with_subagent.json"
AGENT_SOURCES = ("synthetic", "weka")
Args = dict[str, Any]
Builder = Callable[[str | None, Args, int, int | None, int], Workload]
TRACE_KEYS: dict[str, type] = {
    "start": float,
    "duration": float,
    "rate": float,
    "limit": int,
    "priority": int,
}


@dataclass(frozen=True)
class Kind:
    """A workload kind: its builder, its settings (name -> type), their defaults, and whether it reads a
    path (`takes_path`; `path_optional`: it has a packaged file)."""

    build: Builder
    keys: dict[str, type]
    defaults: Args
    takes_path: bool = False
    path_optional: bool = False


def _voice_agents(_: str | None, a: Args, seed: int, mml: int | None, vocab: int) -> Workload:
    profile = VoiceProfile(turns_per_call=a["turns"], system_tokens=a["voice_system"])
    parts = [
        voice_calls(a["callers"], a["duration"], seed, profile=profile, max_model_len=mml, vocab_size=vocab),
        _agents(None, a | {"n": a["agents"]}, seed, mml, vocab),
    ]
    return merge(f"voice{a['callers']}-agents{a['agents']}", parts, seed)


def _voice(_: str | None, a: Args, seed: int, mml: int | None, vocab: int) -> Workload:
    profile = VoiceProfile(turns_per_call=a["turns"], system_tokens=a["voice_system"])
    return voice_calls(
        a["callers"],
        a["duration"],
        seed,
        profile=profile,
        stagger_s=a["stagger"],
        max_model_len=mml,
        vocab_size=vocab,
    )


def _agents(_: str | None, a: Args, seed: int, mml: int | None, vocab: int) -> Workload:
    if a["agent_source"] not in AGENT_SOURCES:
        raise ValueError(f"agent_source must be one of {', '.join(AGENT_SOURCES)}, got {a['agent_source']!r}")
    if a["agent_source"] == "weka":
        if a["common_prefix"]:
            raise ValueError("common_prefix applies to agent_source=synthetic only")
        return weka_agents(
            a["n"],
            a["duration"],
            seed,
            a["agent_trace"] or DEFAULT_AGENT_TRACE,
            stagger_s=a["agent_stagger"],
            warm_start=a["warm"],
            max_model_len=mml,
            vocab_size=vocab,
        )
    if a["agent_trace"] is not None:
        raise ValueError("agent_trace is read only with agent_source=weka")
    return coding_agents(
        a["n"],
        a["duration"],
        seed,
        stagger_s=a["agent_stagger"],
        warm_start=a["warm"],
        common_prefix_tokens=a["common_prefix"],
        max_model_len=mml,
        vocab_size=vocab,
    )


def _long_short(_: str | None, a: Args, seed: int, mml: int | None, vocab: int) -> Workload:
    return long_short(
        a["long"],
        a["shorts"],
        seed,
        long_max_tokens=a["long_max"],
        short_max_tokens=a["short_max"],
        jitter_s=a["jitter"],
        max_model_len=mml,
        vocab_size=vocab,
    )


def _options(a: Args, mml: int | None, vocab: int) -> TraceOptions:
    return TraceOptions(
        start_s=a["start"],
        duration_s=a["duration"],
        rate=a["rate"],
        max_model_len=mml,
        vocab_size=vocab,
        priority=a["priority"],
        limit=a["limit"],
    )


def _trace(load: Callable[..., Workload], **fixed: Any) -> Builder:
    def build(path: str | None, a: Args, seed: int, mml: int | None, vocab: int) -> Workload:
        return load(path, _options(a, mml, vocab), **fixed)

    return build


def _weka(path: str | None, a: Args, seed: int, mml: int | None, vocab: int) -> Workload:
    return load_weka(path or "", _options(a, mml, vocab), copies=a["copies"], stagger_s=a["stagger"])


def _sharegpt(path: str | None, a: Args, seed: int, mml: int | None, vocab: int) -> Workload:
    return load_sharegpt(
        path or None,
        _options(a, mml, vocab),
        seed=seed,
        conversations_per_s=a["conv_rate"],
        think_s=a["think"],
        multi_turn=a["multi_turn"],
        max_conversations=a["conversations"],
        short_max_tokens=a["short_max"],
    )


_AGENT_KEYS: dict[str, type] = {
    "agent_stagger": float,
    "warm": bool,
    "common_prefix": int,
    "agent_source": str,
    "agent_trace": str,
}
_AGENT_DEFAULTS: Args = {
    "agent_stagger": 30.0,
    "warm": True,
    "common_prefix": 0,
    "agent_source": "synthetic",
    "agent_trace": None,
}
_TRACE_DEFAULTS: Args = {"start": 0.0, "duration": None, "rate": 1.0, "limit": None, "priority": None}
KINDS: dict[str, Kind] = {
    "voice-agents": Kind(
        _voice_agents,
        {"callers": int, "agents": int, "duration": float, "turns": int, "voice_system": int} | _AGENT_KEYS,
        {
            "callers": 2,
            "agents": 24,
            "duration": 600.0,
            "turns": 10,
            "voice_system": VoiceProfile.system_tokens,
        }
        | _AGENT_DEFAULTS,
    ),
    "voice": Kind(
        _voice,
        {"callers": int, "duration": float, "turns": int, "stagger": float, "voice_system": int},
        {
            "callers": 2,
            "duration": 600.0,
            "turns": 10,
            "stagger": 5.0,
            "voice_system": VoiceProfile.system_tokens,
        },
    ),
    "agents": Kind(
        _agents, {"n": int, "duration": float} | _AGENT_KEYS, {"n": 24, "duration": 600.0} | _AGENT_DEFAULTS
    ),
    "long-short": Kind(
        _long_short,
        {"long": int, "shorts": int, "long_max": int, "short_max": int, "jitter": float},
        {"long": 50_000, "shorts": 10, "long_max": 256, "short_max": 256, "jitter": 0.5},
    ),
    "azure": Kind(_trace(load_azure, cls="chat"), TRACE_KEYS, _TRACE_DEFAULTS, True),
    "azure-code": Kind(_trace(load_azure, cls="code"), TRACE_KEYS, _TRACE_DEFAULTS, True),
    "mooncake": Kind(_trace(load_mooncake), TRACE_KEYS, _TRACE_DEFAULTS, True),
    "weka": Kind(
        _weka,
        TRACE_KEYS | {"copies": int, "stagger": float},
        _TRACE_DEFAULTS | {"copies": 1, "stagger": 0.0},
        True,
    ),
    "sharegpt": Kind(
        _sharegpt,
        TRACE_KEYS
        | {"conv_rate": float, "think": float, "multi_turn": bool, "conversations": int, "short_max": int},
        _TRACE_DEFAULTS
        | {
            "conv_rate": 1.0,
            "think": 5.0,
            "multi_turn": True,
            "conversations": None,
            "short_max": SHORT_MAX_TOKENS,
        },
        True,
        path_optional=True,
    ),
}
