"""Workloads: sessions of dependent requests, from real traces or generators, for any driver.

- `model`: `WorkloadRequest`, `Session` (when each request is issued), `Workload`.
- `tokens`: deterministic prompt token ids that preserve the prefixes a workload shares.
- `traces`: Azure LLM 2023, Mooncake, WEKA Claude Code and ShareGPT loaders.
- `synth`: voice calls, coding agents, one long request beside short ones.
- Priorities per class: `flatshare.policy.classes.DEFAULT_PRIORITY`.
- `spec`: `WorkloadSpec`, a typed workload name; `read_spec` reads its text form and
  `parse_spec("voice-agents:callers=2,agents=24")` -> `Workload`. `kinds`: the workloads a spec can name.
"""

from __future__ import annotations

from flatshare.workloads.model import (
    Session,
    Workload,
    WorkloadRequest,
    clip_to_model_len,
    merge,
)
from flatshare.workloads.spec import WorkloadSpec, parse_spec, read_spec
from flatshare.workloads.synth import AgentProfile, VoiceProfile, coding_agents, long_short, voice_calls
from flatshare.workloads.traces import (
    TraceOptions,
    load_azure,
    load_mooncake,
    load_sharegpt,
    load_weka,
    weka_sessions,
)

__all__ = [
    "AgentProfile",
    "Session",
    "TraceOptions",
    "VoiceProfile",
    "Workload",
    "WorkloadRequest",
    "WorkloadSpec",
    "clip_to_model_len",
    "coding_agents",
    "load_azure",
    "load_mooncake",
    "load_sharegpt",
    "load_weka",
    "long_short",
    "merge",
    "parse_spec",
    "read_spec",
    "voice_calls",
    "weka_sessions",
]
