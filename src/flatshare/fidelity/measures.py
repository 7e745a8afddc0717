"""What one run measured, per request class: the quantities a fidelity report puts side by side.

From a run's records (`flatshare.runfiles.records`) and engine samples, for each class (`voice`,
`agent`, ...) and for `all`:
- `ttft` (first token - send), `e2e` (last token - send), per request;
- `gap`: every gap between consecutive tokens of a request, pooled over the class's requests;
- `tpot`: per request, (last token - first token) / (tokens - 1): the mean gap, which a client that
  receives tokens in bursts still measures right;
each as p50 and p95 (linear interpolation). Run-wide: `preemptions` (given by the caller: the server's
counter delta, or the simulator's count) and `kv_use_mean` (mean of the samples up to the last reply).
Only `ok` records count; `not_ok` says how many others there were.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from flatshare.runfiles.records import ReplayRecord
from flatshare.runfiles.samples import EngineSample

QUANTITIES = ("ttft", "gap", "tpot", "e2e")
PERCENTILES = (50, 95)


@dataclass(frozen=True)
class RunMetrics:
    """`values[cls][f"{quantity}_p{pct}"]` in seconds (None when the class has no such data)."""

    values: dict[str, dict[str, float | None]]
    counts: dict[str, int]
    preemptions: int
    kv_use_mean: float
    not_ok: int

    def to_json(self) -> dict[str, Any]:
        return {
            "values": self.values,
            "counts": self.counts,
            "preemptions": self.preemptions,
            "kv_use_mean": round(self.kv_use_mean, 4),
            "not_ok": self.not_ok,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RunMetrics:
        return cls(data["values"], data["counts"], data["preemptions"], data["kv_use_mean"], data["not_ok"])


def samples_of(records: Iterable[ReplayRecord]) -> dict[str, dict[str, list[float]]]:
    """The raw samples of each quantity, by class (and `all`)."""
    out: dict[str, dict[str, list[float]]] = {}
    for r in records:
        if r.status != "ok" or not r.token_times_s:
            continue
        times = r.token_times_s
        got = {
            "ttft": [times[0] - r.send_s],
            "e2e": [times[-1] - r.send_s],
            "gap": [b - a for a, b in itertools.pairwise(times)],
            "tpot": [(times[-1] - times[0]) / (len(times) - 1)] if len(times) > 1 else [],
        }
        for cls in (r.cls, "all"):
            bucket = out.setdefault(cls, {q: [] for q in QUANTITIES})
            for q in QUANTITIES:
                bucket[q].extend(got[q])
    return out


def run_metrics(
    records: Sequence[ReplayRecord], samples: Sequence[EngineSample], preemptions: int
) -> RunMetrics:
    """The metrics of one run (see the module docstring)."""
    raw = samples_of(records)
    values: dict[str, dict[str, float | None]] = {}
    for cls, by_quantity in raw.items():
        values[cls] = {
            f"{q}_p{p}": (round(float(np.percentile(xs, p)), 6) if xs else None)
            for q, xs in by_quantity.items()
            for p in PERCENTILES
        }
    counts = {cls: len(by_quantity["ttft"]) for cls, by_quantity in raw.items()}
    return RunMetrics(
        values, counts, preemptions, kv_use_mean(records, samples), sum(r.status != "ok" for r in records)
    )


def kv_use_mean(records: Sequence[ReplayRecord], samples: Sequence[EngineSample]) -> float:
    """Mean KV use over the samples taken before the last reply ended (0 without samples)."""
    ends = [r.end_s for r in records if r.end_s is not None]
    until = max(ends) if ends else float("inf")
    inside = [s.kv_usage for s in samples if s.t <= until]
    return float(np.mean(inside)) if inside else 0.0


def means(records: Sequence[ReplayRecord]) -> dict[str, float]:
    """Mean TTFT, inter-token gap (`itl`) and end-to-end time over all ok requests (seconds)."""
    raw = samples_of(records).get("all", {})
    keys = {"ttft": "ttft", "itl": "gap", "e2e": "e2e"}
    return {k: round(float(np.mean(raw[q])), 6) for k, q in keys.items() if raw.get(q)}
