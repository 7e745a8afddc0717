"""Roofline profiles assembled from a fitted (or spec-derived) linear model and the model's shape.

Every number not fitted to the measured timings is computed here from a stated assumption, so that
`tools/step_fit.py` rewrites the shipped profiles reproducibly:
- fixed cost: the LM head's weights read once a step (vocab x hidden x 2 bytes, not in the measured
  layer operations) at the fitted bandwidth, plus `HOST_OVERHEAD_S` of scheduling, sampling and launch;
- prefill attention: 4 x hidden x layers FLOP per (query, key) pair (QK^T and PV) at
  `ATTENTION_EFFICIENCY` of the card's peak tensor FLOP/s (FlashAttention-2 reaches about half);
- decode attention: a decode reads its whole KV, `kv_bytes_per_token` a context token, at the fitted
  bandwidth.
"""

from __future__ import annotations

from dataclasses import dataclass

from flatshare.sim.linear_fit import BYTES_PER_WEIGHT, LinearFit, sig
from flatshare.sim.measured import Shape
from flatshare.sim.profile import StepTimeProfile
from flatshare.sim.roofline import RooflineLinear

HOST_OVERHEAD_S = 0.001
ATTENTION_EFFICIENCY = 0.5
PCIE4_BYTES_PER_S = 25e9


@dataclass(frozen=True)
class Setup:
    """What a profile needs beside its linear model: the model's shape and vocabulary, the card's peak
    FLOP/s, and the KV cache vLLM would get on it."""

    shape: Shape
    layers: int
    vocab: int
    peak_flops_per_s: float
    default_kv_tokens: int

    @property
    def kv_bytes_per_token(self) -> int:
        head_dim = self.shape.hidden // self.shape.heads
        return self.layers * self.shape.kv_heads * head_dim * 2 * BYTES_PER_WEIGHT


def profile(
    name: str,
    description: str,
    linear: RooflineLinear,
    setup: Setup,
    sources: list[str],
    fit: dict[str, object],
) -> StepTimeProfile:
    lm_head_bytes = setup.vocab * setup.shape.hidden * BYTES_PER_WEIGHT
    pair_flops = 4 * setup.shape.hidden * setup.layers
    return StepTimeProfile(
        name=name,
        description=description,
        step_fixed_s=sig(lm_head_bytes / linear.mem_bytes_per_s + HOST_OVERHEAD_S),
        prefill_token_s=0.0,
        decode_token_s=0.0,
        prefill_attn_pair_s=sig(pair_flops / (setup.peak_flops_per_s * ATTENTION_EFFICIENCY)),
        decode_ctx_token_s=sig(setup.kv_bytes_per_token / linear.mem_bytes_per_s),
        kv_bytes_per_token=setup.kv_bytes_per_token,
        cpu_load_bytes_per_s=PCIE4_BYTES_PER_S,
        default_kv_tokens=setup.default_kv_tokens,
        sources=tuple(sources),
        fit=fit,
        linear=linear,
    )


def fit_summary(fitted: LinearFit, source: str) -> dict[str, object]:
    return {
        "method": "minimax |log(model / measured)| over every token count 1-4,096 (TP 1, median columns "
        "summed over one layer, x layers); differential evolution (seed 0) + Nelder-Mead; tools/step_fit.py",
        "source": source,
        "max_abs_rel_error": round(fitted.max_abs_error, 4),
        "median_abs_rel_error": round(fitted.median_abs_error, 4),
        "worst_tokens": fitted.worst_tokens,
    }


def transfer(
    fitted: RooflineLinear,
    measured_peaks: tuple[float, float],
    target_peaks: tuple[float, float],
    shape: Shape,
    layers: int,
) -> RooflineLinear:
    """`fitted`'s curve (the fractions of peak bandwidth and FLOP/s achieved, activation bytes per token,
    knee, tiles) moved to another card's peaks (memory bytes/s, FLOP/s) and another model shape."""
    params = layers * shape.layer_params
    return RooflineLinear(
        weight_bytes=float(params * BYTES_PER_WEIGHT),
        flops_per_token=float(2 * params),
        mem_bytes_per_s=sig(fitted.mem_bytes_per_s / measured_peaks[0] * target_peaks[0]),
        flops_per_s=sig(fitted.flops_per_s / measured_peaks[1] * target_peaks[1]),
        act_bytes_per_token=fitted.act_bytes_per_token,
        knee=fitted.knee,
        tiles=fitted.tiles,
    )
