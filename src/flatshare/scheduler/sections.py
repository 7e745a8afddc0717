"""One flatshare scheduler's section of vLLM's `--additional-config`, read and checked the same way for each.

Every flatshare scheduler reads its settings from its own key (`make_room`, `sglang_preempt`, `reserve`,
`sage`) into a frozen dataclass; a key the dataclass does not have is an error naming the valid ones, so a
typo fails at start-up rather than running the default. Pure Python: importing this module imports no vLLM.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, TypeVar

T = TypeVar("T")


def read_section(additional: Mapping[str, Any] | None, key: str, cls: type[T], error: type[ValueError]) -> T:
    """`cls(**additional[key])`; absent means all defaults. Raises `error` for a section that is not a JSON
    object or names a field `cls` does not have."""
    section = (additional or {}).get(key, {})
    if not isinstance(section, Mapping):
        raise error(f"additional_config.{key} must be a JSON object")
    known = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    unknown = sorted(set(section) - known)
    if unknown:
        raise error(f"{key}: unknown key(s) {unknown}; valid keys: {sorted(known)}")
    return cls(**dict(section))


def check_bools(config: object, key: str, names: tuple[str, ...], error: type[ValueError]) -> None:
    for name in names:
        value = getattr(config, name)
        if not isinstance(value, bool):
            raise error(f"{key}.{name} must be true or false, got {value!r}")


def check_int(config: object, key: str, name: str, minimum: int | None, error: type[ValueError]) -> None:
    value = getattr(config, name)
    if not isinstance(value, int) or isinstance(value, bool) or (minimum is not None and value < minimum):
        bound = f" >= {minimum}" if minimum is not None else ""
        raise error(f"{key}.{name} must be an integer{bound}, got {value!r}")
