"""Co-location results built by hand for tests: a condition with only the named figures measured."""

from __future__ import annotations

import dataclasses
from typing import Any

from flatshare.colocation.results import ConditionResult


def condition(**fields: Any) -> ConditionResult:
    """A condition with only `fields` measured (counts 0, figures None)."""
    empty: dict[str, Any] = {}
    for f in dataclasses.fields(ConditionResult):
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            empty[f.name] = 0 if f.type == "int" else () if f.type.startswith("tuple[Seconds, ...]") else None
    empty["make_room"] = empty["baseline_counters"] = {}
    return ConditionResult(**{**empty, **fields})
