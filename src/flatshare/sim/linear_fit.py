"""Fit the roofline linear model (`flatshare.sim.roofline`) to a card's measured timings, and score it.

The weights and FLOPs per token come from the model's shape (2 bytes and 2 FLOPs per weight); what is
fitted is the shape of the curve: the achieved fraction of the card's memory bandwidth and of its tensor
FLOP/s, the activation bytes each token moves, the knee, and the GEMM tiles (chosen from `TILE_CHOICES`,
the share between two tile sizes fitted). The loss is the largest |log(model / measured)| over every
measured token count (a minimax fit: the acceptance is a bound on every point, not an average), found by
differential evolution from a fixed seed and polished by Nelder-Mead, so a refit gives the same numbers.
Fitted values are rounded to 4 significant digits and scored after rounding.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from flatshare.sim.measured import Measured
from flatshare.sim.roofline import RooflineLinear, TileRule

# (tokens, per_octave) of each tile rule; two rules share the compute by a fitted share.
TILE_CHOICES: tuple[tuple[tuple[int, int], ...], ...] = (
    ((32, 0),),
    ((64, 0),),
    ((128, 0),),
    ((32, 4),),
    ((64, 4),),
    ((64, 8),),
    ((64, 0), (128, 0)),
    ((32, 0), (128, 0)),
)
# memory efficiency, compute efficiency, activation kB per token, knee, share of the second tile rule
_BOUNDS = [(0.3, 1.2), (0.3, 1.2), (0.0, 12000.0), (1.0, 12.0), (0.0, 1.0)]
BYTES_PER_WEIGHT = 2  # bf16 / fp16


@dataclass(frozen=True)
class LinearFit:
    """A fitted linear model and its largest and median |relative error| over the measured points."""

    linear: RooflineLinear
    max_abs_error: float
    median_abs_error: float
    worst_tokens: int


@dataclass(frozen=True)
class PointError:
    tokens: int
    measured_s: float
    model_s: float

    @property
    def error(self) -> float:
        return self.model_s / self.measured_s - 1


def sig(value: float, digits: int = 4) -> float:
    """`value` rounded to `digits` significant digits."""
    if value == 0:
        return 0.0
    return round(value, digits - 1 - math.floor(math.log10(abs(value))))


def weight_bytes(m: Measured) -> float:
    return float(m.card.layers * m.shape.layer_params * BYTES_PER_WEIGHT)


def flops_per_token(m: Measured) -> float:
    return float(2 * m.card.layers * m.shape.layer_params)


def build(m: Measured, tiles: tuple[tuple[int, int], ...], x: np.ndarray | list[float]) -> RooflineLinear:
    """The rounded linear model for parameters `x` (see `_BOUNDS`) and tile rules `tiles`."""
    mem_eff, flop_eff, act_kb, knee, share = (float(v) for v in x)
    shares = (1.0,) if len(tiles) == 1 else (sig(1 - share), round(1 - sig(1 - share), 6))
    return RooflineLinear(
        weight_bytes=weight_bytes(m),
        flops_per_token=flops_per_token(m),
        mem_bytes_per_s=sig(mem_eff * m.card.peak_mem_bytes_per_s),
        flops_per_s=sig(flop_eff * m.card.peak_flops_per_s),
        act_bytes_per_token=sig(act_kb * 1e3),
        knee=sig(knee),
        tiles=tuple(TileRule(t, k, s) for (t, k), s in zip(tiles, shares, strict=True)),
    )


def point_errors(linear: RooflineLinear, m: Measured) -> list[PointError]:
    """The model against every measured token count, through `RooflineLinear.time_s` itself."""
    return [PointError(n, s, linear.time_s(n)) for n, s in zip(m.tokens, m.seconds, strict=True)]


def score(linear: RooflineLinear, m: Measured) -> LinearFit:
    errors = point_errors(linear, m)
    worst = max(errors, key=lambda e: abs(e.error))
    median = float(np.median([abs(e.error) for e in errors]))
    return LinearFit(linear, abs(worst.error), median, worst.tokens)


def _loss_fn(m: Measured, tiles: tuple[tuple[int, int], ...]) -> Callable[[np.ndarray], float]:
    n = np.array(m.tokens, dtype=float)
    measured = np.array(m.seconds)
    padded = [np.array([TileRule(t, k).padded(int(v)) for v in m.tokens], dtype=float) for t, k in tiles]
    w, f = weight_bytes(m), flops_per_token(m)

    def loss(x: np.ndarray) -> float:
        mem_eff, flop_eff, act_kb, knee, share = x
        pad = padded[0] if len(padded) == 1 else (1 - share) * padded[0] + share * padded[1]
        memory = (w + act_kb * 1e3 * n) / (mem_eff * m.card.peak_mem_bytes_per_s)
        compute = f * pad / (flop_eff * m.card.peak_flops_per_s)
        model = (memory**knee + compute**knee) ** (1 / knee)
        return float(np.max(np.abs(np.log(model / measured))))

    return loss


def fit_card(m: Measured, choices: tuple[tuple[tuple[int, int], ...], ...] = TILE_CHOICES) -> LinearFit:
    """The best (smallest largest error, after rounding) linear model over the tile choices."""
    from scipy.optimize import differential_evolution, minimize

    best: LinearFit | None = None
    for tiles in choices:
        loss = _loss_fn(m, tiles)
        rough = differential_evolution(loss, _BOUNDS, seed=0, tol=1e-8, maxiter=300, polish=False)
        fine = minimize(loss, rough.x, method="Nelder-Mead", options={"xatol": 1e-7, "fatol": 1e-9})
        x = fine.x if fine.fun < rough.fun and _inside(fine.x) else rough.x
        fitted = score(build(m, tiles, x), m)
        if best is None or fitted.max_abs_error < best.max_abs_error - 1e-6:
            best = fitted
    assert best is not None
    return best


def _inside(x: np.ndarray) -> bool:
    return all(lo <= v <= hi for v, (lo, hi) in zip(x, _BOUNDS, strict=True))
