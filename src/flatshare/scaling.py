"""The scale factor's arithmetic, with no dependency (the gateway's image imports the CLI, which reads the
co-location setup, which checks its factor): `flatshare.workloads.scale` applies it to workloads."""

from __future__ import annotations

import math


def check_scale(factor: float) -> float:
    """`factor` if it is a number in (0, 1]; ValueError otherwise."""
    if isinstance(factor, bool) or not isinstance(factor, int | float) or not 0 < factor <= 1:
        raise ValueError(f"scale must be a number in (0, 1], got {factor!r}")
    return float(factor)


def scaled(tokens: int, factor: float) -> int:
    """`tokens` times `factor`, rounded half up; at least 1 when `tokens` is at least 1."""
    if tokens <= 0:
        return 0
    return max(1, math.floor(tokens * factor + 0.5))
