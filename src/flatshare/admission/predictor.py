"""How well sage's output-length predictor is calibrated on a trace: predicted distributions against the
realized lengths (`flatshare experiment sage-calibration`, docs/baselines-engine.md).

The trace's requests are taken in arrival order; each is predicted from its prompt features and the
history so far, then its realized length (the trace's output tokens, which a replay sends as
`max_tokens`) joins the history: one-step-ahead, as if each request finished before the next arrived
(the scheduler learns later, when requests finish, so this is the predictor's best case for recency).
The cap at `max_tokens` is off here: it would be the realized length.

Measures: the randomized PIT (`F(y-1) + V * (F(y) - F(y-1))`, V uniform; uniform on [0, 1] when the
predictions are calibrated) in ten bins, the coverage of the central 50% and 90% intervals (nominal 0.5
and 0.9), the median absolute log2 error of the predicted median, and the same for the prior alone (the
predictor before any request has finished), so the history's contribution is visible.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from flatshare.scheduler.sage_config import SageConfig
from flatshare.scheduler.sage_predict import Features, LengthDistribution, LengthPredictor, prompt_features
from flatshare.workloads.model import WorkloadRequest
from flatshare.workloads.tokens import DEFAULT_VOCAB

PIT_BINS = 10


@dataclass(frozen=True)
class Calibration:
    """The predictor's calibration over `n` requests (module docstring)."""

    n: int
    pit_histogram: tuple[float, ...]
    coverage_50: float
    coverage_90: float
    median_abs_log2_error: float
    prior_median_abs_log2_error: float
    buckets: int

    def lines(self) -> list[str]:
        bars = " ".join(f"{x:.2f}" for x in self.pit_histogram)
        return [
            f"requests: {self.n}  feature buckets: {self.buckets}",
            f"PIT histogram ({PIT_BINS} bins, each 0.10 when calibrated): {bars}",
            f"central 50% interval coverage: {self.coverage_50:.3f} (nominal 0.5)",
            f"central 90% interval coverage: {self.coverage_90:.3f} (nominal 0.9)",
            f"median |log2(predicted median / realized)|: {self.median_abs_log2_error:.2f} "
            f"(prior alone: {self.prior_median_abs_log2_error:.2f})",
        ]


def head_ids(request: WorkloadRequest, n: int) -> list[int]:
    """The first `n` prompt token ids, built from the prompt's first spans only."""
    out: list[int] = []
    for span in request.prompt:
        if len(out) >= n:
            break
        out += [int(x) for x in span.head(n - len(out)).ids(getattr(request, "vocab_size", DEFAULT_VOCAB))]
    return out


def features_of(request: WorkloadRequest, config: SageConfig) -> Features:
    ids = head_ids(request, config.signature_tokens)
    return prompt_features(ids, request.prompt_tokens, config.signature_tokens, config.signature_buckets)


def randomized_pit(dist: LengthDistribution, realized: int, u: float) -> float:
    below, upto = dist.cdf(realized - 1), dist.cdf(realized)
    return below + u * (upto - below)


def _log2_error(dist: LengthDistribution, realized: int) -> float:
    return abs(math.log2(dist.quantile(0.5) / realized))


def calibrate(
    requests: Iterable[WorkloadRequest], config: SageConfig | None = None, seed: int = 0
) -> Calibration:
    """One-step-ahead calibration of the predictor over `requests` in arrival order."""
    c = config or SageConfig()
    predictor = LengthPredictor(
        c.history_per_bucket, c.max_buckets, c.min_history, c.prior_weight, c.prior_max_tokens
    )
    prior = LengthPredictor(
        c.history_per_bucket, c.max_buckets, c.min_history, c.prior_weight, c.prior_max_tokens
    )
    rng = np.random.default_rng(seed)
    ordered = sorted(requests, key=lambda r: (r.arrival_s or 0.0, r.id))
    pits: list[float] = []
    inside_50 = inside_90 = 0
    errors: list[float] = []
    prior_errors: list[float] = []
    for request in ordered:
        features, realized = features_of(request, c), max(1, request.max_tokens)
        dist = predictor.predict(features)
        pits.append(randomized_pit(dist, realized, float(rng.uniform())))
        inside_50 += dist.quantile(0.25) <= realized <= dist.quantile(0.75)
        inside_90 += dist.quantile(0.05) <= realized <= dist.quantile(0.95)
        errors.append(_log2_error(dist, realized))
        prior_errors.append(_log2_error(prior.predict(features), realized))
        predictor.observe(features, realized)
    return _summary(pits, inside_50, inside_90, errors, prior_errors, predictor.buckets)


def _summary(
    pits: Sequence[float], in50: int, in90: int, errors: list[float], prior: list[float], buckets: int
) -> Calibration:
    n = len(pits)
    if n == 0:
        raise ValueError("no requests to calibrate on")
    counts, _ = np.histogram(pits, bins=PIT_BINS, range=(0.0, 1.0))
    return Calibration(
        n=n,
        pit_histogram=tuple(round(float(x) / n, 3) for x in counts),
        coverage_50=in50 / n,
        coverage_90=in90 / n,
        median_abs_log2_error=float(np.median(errors)),
        prior_median_abs_log2_error=float(np.median(prior)),
        buckets=buckets,
    )
