"""Engine options shared by the commands that build a simulated engine (`sim`, `serve-sim`, `replay`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from flatshare.cli.base import parse_json_object

if TYPE_CHECKING:
    from flatshare.sim.config import EngineConfig
    from flatshare.sim.profile import StepTimeProfile

SchedulerOpt = Annotated[str, typer.Option(help="vllm, make-room, or a dotted Scheduler subclass.")]
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
SeedOpt = Annotated[int, typer.Option(help="Seed for generated prompt token ids.")]


def engine_from_options(
    profile: str,
    scheduler: str,
    policy: str,
    kv_tokens: int,
    max_num_batched_tokens: int,
    max_num_seqs: int,
    max_model_len: int,
    block_size: int,
    cpu_tier_tokens: int,
    make_room: str,
) -> tuple[EngineConfig, StepTimeProfile]:
    """The engine settings and profile that `sim` and `serve-sim` share (raises InputError)."""
    from flatshare.sim.config import EngineConfig, fitting_model_len
    from flatshare.sim.profile import DEFAULT_PROFILE, load_profile

    step_profile = load_profile(profile or DEFAULT_PROFILE)
    kv = kv_tokens or step_profile.default_kv_tokens
    config = EngineConfig(
        block_size=block_size,
        kv_tokens=kv,
        max_num_batched_tokens=max_num_batched_tokens,
        max_num_seqs=max_num_seqs,
        policy=policy,
        max_model_len=max_model_len or fitting_model_len(kv, block_size),
        scheduler=scheduler,
        additional_config={"make_room": parse_json_object(make_room, "--make-room")} if make_room else {},
        cpu_tier_tokens=cpu_tier_tokens,
    )
    return config, step_profile
