"""The simulated engine's typer options, shared by `sim`, `serve-sim`, `replay`, `fidelity` and
`experiment colocation`.

Help texts live here; defaults are `ENGINE`'s fields (`flatshare.sim.options.EngineOptions`, whose
own defaults are `EngineConfig`'s). `with_engine_options` gives a command every engine option at once
(or a few, from a preset's defaults: `experiment colocation`) and hands it one `EngineOptions`;
`fidelity` takes a few of them by their aliases.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
from collections.abc import Callable
from dataclasses import fields
from typing import Annotated, Any, TypeVar, get_args

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
KvTokensOpt = Annotated[int | None, typer.Option(help="KV capacity in tokens.")]
BatchedOpt = Annotated[int, typer.Option(help="vLLM's token budget per step.")]
SeqsOpt = Annotated[int, typer.Option(help="vLLM's max running requests.")]
ModelLenOpt = Annotated[int | None, typer.Option(help="vLLM's max model length.")]
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
_OPTIONS: dict[str, Any] = {
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
assert list(_OPTIONS) == [f.name for f in fields(EngineOptions)], "an engine field without an option"
_UNSET = {
    "kv_tokens": "the profile's",
    "max_model_len": f"what the KV holds, at most {DEFAULT_ENGINE.max_model_len}",
}
"""What leaving an option out means where `EngineOptions` derives it (its default is None)."""


def engine_option(name: str, default: Any, preset: str = "") -> Any:
    """Engine option `name`'s typer annotation, its help ending in what leaving it out gives: `[PRESET:
    default]` where `preset` names where the default comes from, `[...]` where it is derived (None)."""
    kind, info = get_args(_OPTIONS[name])
    text = info.help.rstrip(".")
    if preset:
        return Annotated[kind, typer.Option(help=f"{text} [{preset}: {default}].", show_default=False)]
    if default is None and name in _UNSET:
        return Annotated[kind, typer.Option(help=f"{text} [{_UNSET[name]}].")]
    return _OPTIONS[name]


ENGINE_OPTIONS: dict[str, Any] = {name: engine_option(name, getattr(ENGINE, name)) for name in _OPTIONS}

Command = TypeVar("Command", bound=Callable[..., Any])


def with_engine_options(
    *,
    own: tuple[str, ...] = (),
    only: tuple[str, ...] | None = None,
    defaults: EngineOptions = ENGINE,
    preset: str = "",
    into: str = "engine",
) -> Callable[[Command], Command]:
    """Give a typer command every engine option (after its own parameters), or those named in `only`,
    and call it with `engine=EngineOptions(...)` built from them.

    The command declares `engine: EngineOptions` (not an option itself). A field named in `own` stays
    the command's own parameter (declared by it, with its own help) and is left at `defaults`' value in
    `engine`: `replay` reads `max_model_len` its own way. `defaults` gives the options' defaults
    (`EngineOptions`' own unless a command starts from a preset, named by `preset` in the help:
    `experiment colocation` takes the write-up's setup). `into`: the parameter that takes the
    `EngineOptions` (`engine` unless the command has an option of that name).
    """

    def decorate(command: Command) -> Command:
        signature = inspect.signature(command, eval_str=True)
        if into not in signature.parameters:
            raise TypeError(f"{command.__name__} takes no `{into}` parameter")
        taken = [name for name in (ENGINE_OPTIONS if only is None else only) if name not in own]
        clash = set(taken) & set(signature.parameters)
        if clash:
            raise TypeError(f"{command.__name__} declares engine options itself: {sorted(clash)}")
        params = [p for p in signature.parameters.values() if p.name != into]
        params += [
            inspect.Parameter(
                name,
                inspect.Parameter.KEYWORD_ONLY,
                annotation=engine_option(name, getattr(defaults, name), preset),
                default=getattr(defaults, name),
            )
            for name in taken
        ]

        @functools.wraps(command)
        def run(**values: Any) -> Any:
            engine = dataclasses.replace(defaults, **{name: values.pop(name) for name in taken})
            return command(**{into: engine}, **values)

        del run.__wrapped__  # typer reads the signature below, not the command's
        run.__signature__ = signature.replace(parameters=params)  # type: ignore[attr-defined]
        run.__annotations__ = {p.name: p.annotation for p in params}
        return run  # type: ignore[return-value]

    return decorate
