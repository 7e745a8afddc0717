"""Comparing runs: relative errors, the real-vs-real noise, and the bound each error must stay within.

The reference is the first real run. For every row (a class and a quantity, or a run-wide quantity):
- `sim_error` = sim / real-1 - 1 (for `preemptions`: (sim - real-1) / max(real-1, 1));
- `noise` = the largest |real-k / real-1 - 1| over the other real runs (None with one real run);
- `bound` = max(`floor`, `k` x noise): a simulator that behaves like one more real run would, with one
  noise sample, err by about the noise; `k` = 2 leaves room for that sample being small, and `floor`
  (15%, the acceptance target) keeps a lucky pair of quiet runs from demanding more than is asked.
  For the preemption count the bound also holds `k` x sqrt(n) / n: a count of n events differs by
  about sqrt(n) between otherwise identical runs (Poisson), which two runs cannot show reliably.
Rows of class `engine` compare vLLM's own means (its histograms of TTFT, inter-token latency and
end-to-end latency, measured in the API server from the engine's step timestamps before any HTTP
response) with the simulator's means: the engine's side of the comparison, free of how the HTTP path
delivers tokens. A row is `ok` when |sim_error| <= bound. `checked` rows (TTFT and tpot p50/p95 of
every class, the engine means, the preemption count and the mean KV use) decide the verdict.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from flatshare.fidelity.measures import RunMetrics

CHECKED = ("ttft_p50", "ttft_p95", "tpot_p50", "tpot_p95")
RUN_WIDE = ("preemptions", "kv_use_mean")
ENGINE_MEANS = ("ttft", "itl", "e2e")


@dataclass(frozen=True)
class Bounds:
    floor: float = 0.15
    k: float = 2.0

    def __post_init__(self) -> None:
        if not (self.floor > 0 and self.k > 0):
            raise ValueError("the floor and k of the bounds must be > 0")

    def bound(self, noise: float | None, count: float | None = None) -> float:
        """The bound for a row with real-vs-real `noise`; `count`: the reference count, for counts."""
        poisson = self.k / max(count, 1.0) ** 0.5 if count is not None else 0.0
        return max(self.floor, poisson, 0.0 if noise is None else self.k * noise)


@dataclass(frozen=True)
class Row:
    cls: str
    quantity: str
    real: tuple[float | None, ...]
    sim: float | None
    sim_error: float | None
    noise: float | None
    bound: float
    checked: bool

    @property
    def ok(self) -> bool:
        return self.sim_error is not None and abs(self.sim_error) <= self.bound

    def to_json(self) -> dict[str, Any]:
        return {**self.__dict__, "real": list(self.real), "ok": self.ok}


def relative(value: float | None, reference: float | None, count: bool = False) -> float | None:
    """value / reference - 1 (counts: (value - reference) / max(reference, 1)); None if undefined."""
    if value is None or reference is None:
        return None
    if count:
        return round((value - reference) / max(reference, 1.0), 4)
    return None if reference <= 0 else round(value / reference - 1.0, 4)


def compare(
    real: Sequence[RunMetrics],
    sim: RunMetrics,
    bounds: Bounds,
    real_engine: Sequence[dict[str, float]] = (),
    sim_engine: dict[str, float] | None = None,
) -> list[Row]:
    """One row per class and quantity present in the first real run, the run-wide rows, and (given the
    real runs' server means and the simulator's means) the `engine` rows."""
    if not real:
        raise ValueError("need at least one real run")
    rows = []
    for cls, values in real[0].values.items():
        for quantity in values:
            got = tuple(r.values.get(cls, {}).get(quantity) for r in real)
            simulated = sim.values.get(cls, {}).get(quantity)
            rows.append(_row(cls, quantity, got, simulated, bounds, quantity in CHECKED and cls != "all"))
    for quantity in RUN_WIDE:
        got = tuple(float(getattr(r, quantity)) for r in real)
        rows.append(_row("run", quantity, got, float(getattr(sim, quantity)), bounds, True))
    if real_engine and sim_engine is not None:
        for key in ENGINE_MEANS:
            got = tuple(m.get(key) for m in real_engine)
            rows.append(_row("engine", f"{key}_mean", got, sim_engine.get(key), bounds, True))
    return rows


def _row(
    cls: str, quantity: str, real: tuple[float | None, ...], sim: float | None, bounds: Bounds, checked: bool
) -> Row:
    count = quantity == "preemptions"
    errors = [relative(r, real[0], count) for r in real[1:]]
    noise = max((abs(e) for e in errors if e is not None), default=None)
    bound = bounds.bound(noise, real[0] if count else None)
    return Row(cls, quantity, real, sim, relative(sim, real[0], count), noise, bound, checked)


def verdict(rows: Sequence[Row]) -> bool:
    """True when every checked row is within its bound."""
    return all(r.ok for r in rows if r.checked)
