"""Saving calibrated thresholds into the user's gateway config file (`calibrate-thresholds --config`).

Everything is checked before the file is touched: the file is read within `flatshare.jsonin`'s bounds and
must parse; the edited text is parsed again and must (1) hold exactly the old settings with the three
threshold keys set, and (2) build a valid `GatewayConfig`. Only then is it written, atomically
(`flatshare.safeout`). Any failure is an InputError and the file is left as it was.

TOML is edited with tomlkit, which keeps the user's comments, layout and table style: a `[thresholds]`
table (header comment and all), an inline `thresholds = {...}` or dotted `thresholds.kv_usage = ...` keys
are updated where they are; a missing table is appended. A `thresholds` that is not a table is refused,
with a hint to paste the table the command prints without `--config`. JSON files are rewritten whole
(JSON has no comments), non-ASCII text kept as it is. A symlink given as `--config` is refused (editing
would replace the link by a file).
"""

from __future__ import annotations

import dataclasses
import json
import tomllib
from pathlib import Path
from typing import Any

import tomlkit
from tomlkit.exceptions import TOMLKitError
from tomlkit.items import InlineTable, Table

from flatshare import jsonin, safeout
from flatshare.errors import InputError
from flatshare.gateway.config import GatewayConfig
from flatshare.gateway.configfile import build, read_mapping
from flatshare.policy.routing import ThresholdConfig

PASTE_HINT = "run without --config and paste the printed [thresholds] table"


def save_thresholds(path: Path, thresholds: ThresholdConfig) -> None:
    """Set `thresholds` in the existing config file at `path` (module docstring); InputError, with the
    file unchanged, when it cannot be done safely."""
    if path.is_symlink():
        raise InputError(f"{path}: is a symlink; give --config the file it points to ({path.resolve()})")
    if not path.is_file():
        raise InputError(f"{path}: no such config file")
    old = read_mapping(path)
    values = dataclasses.asdict(thresholds)
    current = old.get("thresholds", {})
    if not isinstance(current, dict):
        raise InputError(f"{path}: thresholds is {current!r}, not a table; {PASTE_HINT}")
    expected = {**old, "thresholds": {**current, **values}}
    if path.suffix == ".toml":
        text = _edited_toml(jsonin.read_text(path), values, path)
        new = _parse_toml(text, path)
    else:
        text = json.dumps(expected, indent=2, ensure_ascii=False) + "\n"
        new = json.loads(text)
    if new != expected:
        raise InputError(f"{path}: cannot set the thresholds without changing other settings; {PASTE_HINT}")
    build(GatewayConfig, new, str(path))
    safeout.write_text(path, text)


def _edited_toml(text: str, values: dict[str, Any], path: Path) -> str:
    try:
        doc = tomlkit.parse(text)
        table = doc.get("thresholds")
        if table is None:
            table = tomlkit.table()
            doc.add("thresholds", table)
        if not isinstance(table, Table | InlineTable):
            raise InputError(f"{path}: thresholds is not a table; {PASTE_HINT}")
        for key, value in values.items():
            table[key] = value
        return tomlkit.dumps(doc)
    except (TOMLKitError, ValueError, TypeError) as exc:
        if isinstance(exc, InputError):
            raise
        raise InputError(f"{path}: cannot edit it ({exc}); {PASTE_HINT}") from exc


def _parse_toml(text: str, path: Path) -> dict[str, Any]:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise InputError(f"{path}: the edited file would not be TOML ({exc}); {PASTE_HINT}") from exc
