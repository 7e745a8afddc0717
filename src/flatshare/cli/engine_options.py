"""The simulated engine's typer options, shared by `sim`, `serve-sim`, `replay` and `fidelity`.

Help texts live here; defaults are `ENGINE`'s fields (`flatshare.sim.options.EngineOptions`, whose
own defaults are `EngineConfig`'s). `with_engine_options` gives a command every engine option at once
and hands it one `engine: EngineOptions`; `fidelity` takes a few of them by their aliases.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from dataclasses import fields
from typing import Annotated, Any, TypeVar

import typer

from flatshare.schedulers import SCHEDULERS
from flatshare.sim.config import DEFAULT_ENGINE
from flatshare.sim.options import EngineOptions

ENGINE = EngineOptions()

SchedulerOpt = Annotated[
    str,
    typer.Option(help=f"{', '.join(e.alias for e in SCHEDULERS)}, or a dotted Scheduler subclass."),
]
PolicyOpt = Annotated[str, typer.Option(help="vLLM scheduling policy: fcfs or priority.")]
ProfileOpt = Annotated[str, typer.Option(help="Step-time profile: a shipped name or a JSON file.")]
KvTokensOpt = Annotated[int | None, typer.Option(help="KV capacity in tokens [the profile's].")]
BatchedOpt = Annotated[int, typer.Option(help="vLLM's token budget per step.")]
SeqsOpt = Annotated[int, typer.Option(help="vLLM's max running requests.")]
ModelLenOpt = Annotated[
    int | None,
    typer.Option(
        help=f"vLLM's max model length [what the KV holds, at most {DEFAULT_ENGINE.max_model_len}]."
    ),
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

# One typer option per `EngineOptions` field, in the order `--help` lists them.
ENGINE_OPTIONS: dict[str, Any] = {
    "scheduler": SchedulerOpt,
    "policy": PolicyOpt,
    "profile": ProfileOpt,
    "kv_tokens": KvTokensOpt,
    "max_num_batched_tokens": BatchedOpt,
    "max_num_seqs": SeqsOpt,
    "max_model_len": ModelLenOpt,
    "block_size": BlockOpt,
    "cpu_tier_tokens": TierOpt,
    "make_room": MakeRoomOpt,
    "additional_config": AdditionalConfigOpt,
}
assert set(ENGINE_OPTIONS) == {f.name for f in fields(EngineOptions)}, "an engine field without an option"

Command = TypeVar("Command", bound=Callable[..., Any])


def with_engine_options(*, own: tuple[str, ...] = ()) -> Callable[[Command], Command]:
    """Give a typer command every engine option (after its own parameters) and call it with
    `engine=EngineOptions(...)` built from them.

    The command declares `engine: EngineOptions` (not an option itself). A field named in `own` stays
    the command's own parameter (declared by it, with its own help) and is left at `EngineOptions`'
    default in `engine`: `replay` reads `max_model_len` its own way.
    """

    def decorate(command: Command) -> Command:
        signature = inspect.signature(command, eval_str=True)
        if "engine" not in signature.parameters:
            raise TypeError(f"{command.__name__} takes no `engine` parameter")
        taken = [name for name in ENGINE_OPTIONS if name not in own]
        clash = set(taken) & set(signature.parameters)
        if clash:
            raise TypeError(f"{command.__name__} declares engine options itself: {sorted(clash)}")
        params = [p for p in signature.parameters.values() if p.name != "engine"]
        params += [
            inspect.Parameter(
                name,
                inspect.Parameter.KEYWORD_ONLY,
                annotation=ENGINE_OPTIONS[name],
                default=getattr(ENGINE, name),
            )
            for name in taken
        ]

        @functools.wraps(command)
        def run(**values: Any) -> Any:
            engine = EngineOptions(**{name: values.pop(name) for name in taken})
            return command(engine=engine, **values)

        del run.__wrapped__  # typer reads the signature below, not the command's
        run.__signature__ = signature.replace(parameters=params)  # type: ignore[attr-defined]
        run.__annotations__ = {p.name: p.annotation for p in params}
        return run  # type: ignore[return-value]

    return decorate
