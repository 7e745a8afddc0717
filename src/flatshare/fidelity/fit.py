"""Fitting the step-time model to probes: features, non-negative least squares, residuals.

A probe is one measured duration (seconds) together with the engine work it covered, as the simulator
would price it: a list of steps (each a list of `ScheduledWork`) and a weight per step (1 for a whole
step, 0.5 for the expected wait for a step already running when the probe's request arrived). Its
feature vector is the weighted sum over its steps of

    (1, prefill tokens, decode tokens, prefill attention pairs, decode context tokens)

in the order of `COEFFICIENTS`, so `features . coefficients` is exactly what `StepTimeProfile.step_time`
adds up (without CPU-tier loads). Every probe is timed by an HTTP client from sending a request to a
token arriving, so it also holds one pass through the API server (request in, token out) that no engine
step covers: the fit gives it its own non-negative term, `request_latency_s`, reported beside the
coefficients (the simulator has no such term; see `flatshare.fidelity.compare`). The fit minimises the squared RELATIVE error over probes (each row is
divided by its measurement) subject to every coefficient >= 0 (`scipy.optimize.nnls`), so a 10 ms probe
counts as much as a 1 s one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy.optimize import nnls

from flatshare.sim.profile import ScheduledWork, StepTimeProfile

COEFFICIENTS = (
    "step_fixed_s",
    "prefill_token_s",
    "decode_token_s",
    "prefill_attn_pair_s",
    "decode_ctx_token_s",
)
MIN_STEP_S = 1e-6  # a profile's step_fixed_s must be > 0


@dataclass(frozen=True)
class Probe:
    """One measurement: `measured_s` (the median of `samples_s`) for `steps` of engine work.

    `kind` groups probes (`prefill`, `decode`, `prefill+decode`); `detail` holds what was sent and any
    side measurement for the record. `client_timed`: timed by an HTTP client, so the measurement holds
    one request's pass through the API server (False: timed by the server's own step timestamps).
    """

    name: str
    kind: str
    steps: tuple[tuple[ScheduledWork, ...], ...]
    weights: tuple[float, ...]
    samples_s: tuple[float, ...]
    detail: dict[str, Any] = field(default_factory=dict)
    client_timed: bool = True

    def __post_init__(self) -> None:
        if len(self.steps) != len(self.weights) or not self.steps:
            raise ValueError(f"probe {self.name}: needs one weight per step and at least one step")
        if not self.samples_s or min(self.samples_s) <= 0:
            raise ValueError(f"probe {self.name}: needs positive measurements")

    @property
    def measured_s(self) -> float:
        return float(np.median(self.samples_s))

    def features(self) -> np.ndarray:
        return sum(
            (w * step_features(step) for step, w in zip(self.steps, self.weights, strict=True)),
            start=np.zeros(len(COEFFICIENTS)),
        )


def step_features(work: Sequence[ScheduledWork]) -> np.ndarray:
    """The feature vector of one step (see the module docstring)."""
    out = np.zeros(len(COEFFICIENTS))
    out[0] = 1.0
    for item in work:
        if item.is_decode:
            out[2] += item.tokens
            out[4] += item.context
        else:
            out[1] += item.tokens
            out[3] += item.tokens * (item.context + item.tokens / 2)
    return out


@dataclass(frozen=True)
class Fit:
    """Fitted coefficients (seconds per unit, by name) and per-probe residuals."""

    coefficients: dict[str, float]
    request_latency_s: float
    residuals: list[dict[str, Any]]

    @property
    def median_abs_rel_error(self) -> float:
        return float(np.median([abs(r["rel_error"]) for r in self.residuals]))

    @property
    def max_abs_rel_error(self) -> float:
        return float(max(abs(r["rel_error"]) for r in self.residuals))

    def to_json(self) -> dict[str, Any]:
        return {
            "method": "non-negative least squares on relative error (scipy.optimize.nnls)",
            "request_latency_s": round(self.request_latency_s, 6),
            "probes": len(self.residuals),
            "median_abs_rel_error": round(self.median_abs_rel_error, 4),
            "max_abs_rel_error": round(self.max_abs_rel_error, 4),
            "residuals": self.residuals,
        }


def fit_probes(probes: Sequence[Probe], request_latency: bool = True) -> Fit:
    """Fit the coefficients (and `request_latency_s` unless `request_latency` is False) to `probes`.

    A coefficient whose feature is zero in every probe stays 0. `predicted_s` in the residuals includes
    the request latency; `predicted_steps_s` is the engine's part alone (what the simulator charges).
    """
    if len(probes) < 2:
        raise ValueError("need at least two probes to fit")
    steps = np.array([p.features() for p in probes])
    passes = np.array([[1.0 if p.client_timed else 0.0] for p in probes])
    a = np.hstack([steps, passes]) if request_latency else steps
    y = np.array([p.measured_s for p in probes])
    free = [i for i in range(a.shape[1]) if a[:, i].any()]
    scale = np.abs(a[:, free]).max(axis=0)
    solution, _ = nnls(a[:, free] / scale / y[:, None], np.ones(len(y)), maxiter=10_000)
    coef = np.zeros(a.shape[1])
    coef[free] = solution / scale
    coef[0] = max(coef[0], MIN_STEP_S)
    engine = steps @ coef[: len(COEFFICIENTS)]
    latency = float(coef[len(COEFFICIENTS)]) if request_latency else 0.0
    residuals = [
        {
            "probe": p.name,
            "kind": p.kind,
            "measured_s": round(p.measured_s, 6),
            "predicted_s": round(float(pred + latency * p.client_timed), 6),
            "predicted_steps_s": round(float(pred), 6),
            "rel_error": round(float((pred + latency * p.client_timed) / p.measured_s - 1), 4),
            "samples_s": [round(s, 6) for s in p.samples_s],
            **p.detail,
        }
        for p, pred in zip(probes, engine, strict=True)
    ]
    names = dict(zip(COEFFICIENTS, coef[: len(COEFFICIENTS)].tolist(), strict=True))
    return Fit(names, latency, residuals)


def predict(profile: StepTimeProfile, probe: Probe) -> float:
    """What the simulator would charge for `probe`'s work under `profile` (for checks)."""
    return sum(w * profile.step_time(step) for step, w in zip(probe.steps, probe.weights, strict=True))
