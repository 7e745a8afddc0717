"""Per-run metrics of the admission experiment, from one saved run.

Short requests: in the synthetic workloads the ten `short` requests; in traces every request with at most
256 output tokens (`max_tokens`) sent in the evaluation window `[eval_from_s, replay_s)` (the last 80%).
A short request that never got a token counts as `FAILED_TTFT_S`. Long requests: prompts above the
run's `long_input_tokens`; `short_input_ttfts` are the short requests that are not long (what make-room,
which ranks requests by input, protects). `ttlts`: every evaluated request's time to last token (the
SageSched paper's metric), a failed one counting as `FAILED_TTFT_S`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from flatshare.admission.plan import SHORT_MAX_TOKENS
from flatshare.admission.results import Slowdown
from flatshare.admission.runs import SavedRun
from flatshare.runfiles.records import ReplayRecord

FAILED_TTFT_S = 30.0


@dataclass(frozen=True)
class RunMetrics:
    """One run's numbers; `routed_away` is None for policies without the threshold rule."""

    short_ttfts: dict[str, float]
    short_ttft_p95_s: float | None
    short_input_ttfts: list[float]
    long_ttfts: list[float]
    tokens_per_s: float | None
    long_decisions: int
    routed_away: int | None
    kv_usage: list[float]
    waiting: list[int]
    failed: int
    ttlts: dict[str, float]
    mean_ttlt_s: float | None


def ttft_or_failed(record: ReplayRecord) -> float:
    ttft = record.ttft_s
    return FAILED_TTFT_S if ttft is None or record.status != "ok" else ttft


def ttlt_or_failed(record: ReplayRecord) -> float:
    if record.status != "ok" or record.end_s is None:
        return FAILED_TTFT_S
    return record.end_s - record.send_s


def in_eval(run: SavedRun, t: float) -> bool:
    start = float(run.facts["eval_from_s"])
    end = run.facts["replay_s"]
    return t >= start and (end is None or t < float(end))


def is_short(run: SavedRun, record: ReplayRecord) -> bool:
    if run.facts["part"] in ("synthetic", "alone"):
        return record.cls == "short"
    return record.max_tokens <= SHORT_MAX_TOKENS


def _tokens_per_s(run: SavedRun) -> float | None:
    if run.facts["part"] == "alone":
        return None
    times = [t for r in run.records for t in r.token_times_s]
    if not times:
        return None
    if run.facts["replay_s"] is None:
        span = max(times) - min(r.send_s for r in run.records)
        return len(times) / span if span > 0 else None
    start, end = float(run.facts["eval_from_s"]), float(run.facts["replay_s"])
    return sum(start <= t < end for t in times) / (end - start)


def run_metrics(run: SavedRun, long_input_tokens: int | None) -> RunMetrics:
    """Metrics of one saved run; `long_input_tokens` overrides the run's own (the window's calibration)."""
    threshold = long_input_tokens if long_input_tokens is not None else run.facts.get("long_input_tokens")
    evaluated = [r for r in run.records if in_eval(run, r.send_s)]
    shorts = {r.id: ttft_or_failed(r) for r in evaluated if is_short(run, r)}
    prompts = {r.id: r.prompt_tokens for r in evaluated}
    short_input = [t for rid, t in shorts.items() if threshold is None or prompts[rid] <= threshold]
    longs = [ttft_or_failed(r) for r in evaluated if threshold is not None and r.prompt_tokens > threshold]
    decisions = [d for d in run.decisions if in_eval(run, d.t)]
    eligible = [d for d in decisions if threshold is not None and d.input_tokens > threshold]
    rule = run.facts["condition"]["routing_policy"] == "threshold"
    samples = [s for s in run.samples if in_eval(run, float(s["t"]))]
    ttlts = {r.id: ttlt_or_failed(r) for r in evaluated}
    return RunMetrics(
        short_ttfts=shorts,
        short_ttft_p95_s=float(np.percentile(list(shorts.values()), 95)) if shorts else None,
        short_input_ttfts=short_input,
        long_ttfts=longs,
        tokens_per_s=_tokens_per_s(run),
        long_decisions=len(eligible),
        routed_away=sum(d.moved for d in eligible) if rule else None,
        kv_usage=[float(s["kv_usage"]) for s in samples],
        waiting=[int(s["waiting"]) for s in samples],
        failed=sum(r.status != "ok" for r in evaluated),
        ttlts=ttlts,
        mean_ttlt_s=float(np.mean(list(ttlts.values()))) if ttlts else None,
    )


def slowdown_vs_alone(mine: dict[int, RunMetrics], alone: dict[int, RunMetrics]) -> Slowdown | None:
    """Each short's TTFT over its TTFT alone (same seed, same request): median and max."""
    ratios = [
        ttft / alone[seed].short_ttfts[rid]
        for seed, m in mine.items()
        if seed in alone
        for rid, ttft in m.short_ttfts.items()
        if alone[seed].short_ttfts.get(rid)
    ]
    if not ratios:
        return None
    return Slowdown(median=round(float(np.median(ratios)), 2), max=round(max(ratios), 2))
