"""The simulated engine's typer options, shared by `sim`, `serve-sim`, `replay` and `fidelity`.

Help texts live here; defaults are `ENGINE`'s fields (`flatshare.sim.options.EngineOptions`, whose
own defaults are `EngineConfig`'s), and `EngineOptions(...)` turns the parsed values into a config.
"""

from __future__ import annotations

from typing import Annotated

import typer

from flatshare.sim.options import EngineOptions

ENGINE = EngineOptions()

SchedulerOpt = Annotated[
    str, typer.Option(help="vllm, make-room, sglang-preempt, reserve, or a dotted Scheduler subclass.")
]
PolicyOpt = Annotated[str, typer.Option(help="vLLM scheduling policy: fcfs or priority.")]
ProfileOpt = Annotated[str, typer.Option(help="Step-time profile: a shipped name or a JSON file.")]
KvTokensOpt = Annotated[int, typer.Option(help="KV capacity in tokens (0: the profile's).")]
BatchedOpt = Annotated[int, typer.Option(help="vLLM's token budget per step.")]
SeqsOpt = Annotated[int, typer.Option(help="vLLM's max running requests.")]
ModelLenOpt = Annotated[
    int, typer.Option(help="vLLM's max model length (0: what the KV holds, at most 32768).")
]
BlockOpt = Annotated[int, typer.Option(help="KV block size in tokens.")]
TierOpt = Annotated[int, typer.Option(help="Simulated CPU KV tier capacity in tokens (0: off).")]
MakeRoomOpt = Annotated[str, typer.Option(help="make-room settings as JSON, e.g. '{\"enabled\": true}'.")]
AdditionalConfigOpt = Annotated[
    str,
    typer.Option(
        help="vLLM's --additional-config as JSON; each flatshare scheduler reads its own key, e.g. "
        '\'{"sglang_preempt": {"enabled": true, "threshold": 5}}\' (docs/baselines-engine.md).'
    ),
]
SeedOpt = Annotated[int, typer.Option(help="Seed for generated prompt token ids.")]
