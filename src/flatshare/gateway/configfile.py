"""Reading a `GatewayConfig` from a TOML or JSON file (plus CLI overrides); `calibrate_save` saves thresholds into one.

Keys map one to one onto the dataclass fields of `config.py`: tables onto nested dataclasses, arrays of
tables onto tuples of them. Unknown keys, wrong types and failed checks raise `InputError` naming the
file and the key path, e.g. `gw.toml: poll.interval_s must be > 0, got 0`.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
import tomllib
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from flatshare import jsonin
from flatshare.errors import InputError
from flatshare.gateway.config import GatewayConfig

CONFIG_SUFFIXES = (".toml", ".json")


def load_config(path: Path | None = None, overrides: Mapping[str, Any] | None = None) -> GatewayConfig:
    """The file's settings (none: defaults) with `overrides` (top-level keys) on top."""
    data: dict[str, Any] = read_mapping(path) if path is not None else {}
    data.update({key: value for key, value in (overrides or {}).items() if value is not None})
    where = str(path) if path is not None else "settings"
    return build(GatewayConfig, data, where)


def read_mapping(path: Path) -> dict[str, Any]:
    """The raw table of a `.toml` or `.json` file (UTF-8; JSON within `flatshare.jsonin`'s limits). Any
    other suffix is refused, YAML with a hint: the gateway reads TOML and JSON only."""
    _check_suffix(path)
    text = jsonin.read_text(path)
    data = jsonin.loads(text, str(path)) if path.suffix == ".json" else _read_toml(text, path)
    if not isinstance(data, dict):
        raise InputError(f"{path}: must hold a table (an object)")
    return data


def _read_toml(text: str, path: Path) -> dict[str, Any]:
    """A TOML document within `flatshare.jsonin`'s limits (as a JSON file is read): `tomllib` takes
    `inf`, `nan` and integers of any length up to CPython's 4,300 digits (past them a bare ValueError),
    and recurses once per level of nested arrays (RecursionError)."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise InputError(f"{path}: not valid TOML ({exc})") from exc
    except ValueError as exc:  # int() refusing a number of more than 4,300 digits
        raise InputError(f"{path}: not valid TOML (an integer of more than 4300 digits)") from exc
    except RecursionError as exc:
        raise InputError(f"{path}: not valid TOML (nested too deep)") from exc
    jsonin.check_limits(data, str(path))
    return data


def _check_suffix(path: Path) -> None:
    if path.suffix not in CONFIG_SUFFIXES:
        hint = " (YAML is not read: write the same keys as TOML)" if path.suffix in (".yaml", ".yml") else ""
        shown = repr(path.suffix) if path.suffix else "no suffix"
        raise InputError(f"{path}: a config file must be .toml or .json, not {shown}{hint}")


def build(cls: type[Any], data: Any, where: str, path: str = "") -> Any:
    """An instance of dataclass `cls` from a mapping, checking keys and types (see module docstring)."""
    label = path or "the top level"
    if not isinstance(data, dict):
        raise InputError(f"{where}: {label} must be a table")
    hints = typing.get_type_hints(cls)
    known = [f.name for f in dataclasses.fields(cls)]
    unknown = sorted(set(data) - set(known))
    if unknown:
        shown = ", ".join(_key(k) for k in unknown)
        raise InputError(f"{where}: unknown key {shown} in {label} (known: {', '.join(known)})")
    kwargs = {name: _convert(hints[name], value, where, _join(path, name)) for name, value in data.items()}
    try:
        return cls(**kwargs)
    except TypeError as exc:  # a required key is missing
        missing = [f.name for f in dataclasses.fields(cls) if f.name not in data and _required(f)]
        raise InputError(f"{where}: {label} needs {', '.join(missing)}") from exc
    except ValueError as exc:
        raise InputError(f"{where}: {exc}") from exc


def _required(f: dataclasses.Field[Any]) -> bool:
    return f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING


def _join(path: str, name: str) -> str:
    return f"{path}.{_key(name)}" if path else _key(name)


_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")


def _key(name: object) -> str:
    """A key as an error message shows it: bare when TOML would write it bare, else quoted with every
    control and non-ASCII character escaped (a key from the file may hold a newline: the message stays
    one line)."""
    text = str(name)
    return text if _BARE_KEY.fullmatch(text) else json.dumps(text)


def _convert(hint: Any, value: Any, where: str, path: str) -> Any:
    origin = typing.get_origin(hint)
    if dataclasses.is_dataclass(hint):
        return build(typing.cast(type[Any], hint), value, where, path)
    if origin is tuple:
        if not isinstance(value, list):
            raise InputError(f"{where}: {path} must be a list")
        item = typing.get_args(hint)[0]
        return tuple(_convert(item, v, where, f"{path}[{i}]") for i, v in enumerate(value))
    if origin is dict:
        if not isinstance(value, dict):
            raise InputError(f"{where}: {path} must be a table")
        kind = typing.get_args(hint)[1]
        return {str(k): _convert(kind, v, where, _join(path, str(k))) for k, v in value.items()}
    if origin in (typing.Union, types.UnionType):
        return _either(typing.get_args(hint), value, where, path)
    return _scalar(hint, value, where, path)


def _either(kinds: tuple[Any, ...], value: Any, where: str, path: str) -> Any:
    """A scalar of the first of `kinds` it is (`float | str`: baseline settings)."""
    for kind in kinds:
        try:
            return _scalar(kind, value, where, path)
        except InputError:
            continue
    names = " or ".join(kind.__name__ for kind in kinds)
    raise InputError(f"{where}: {path} must be {names}, got {value!r}")


def _scalar(hint: Any, value: Any, where: str, path: str) -> Any:
    ok = {
        int: isinstance(value, int) and not isinstance(value, bool),
        float: isinstance(value, int | float) and not isinstance(value, bool),
        bool: isinstance(value, bool),
        str: isinstance(value, str),
    }[hint]
    if not ok:
        raise InputError(f"{where}: {path} must be {hint.__name__}, got {value!r}")
    if hint is float and isinstance(value, float) and not math.isfinite(value):
        raise InputError(f"{where}: {path} must be a finite number, got {value!r}")
    return float(value) if hint is float else value
