"""`summary.json` of an admission experiment, computed from saved runs only (schema: docs/admission.md).

Per workload (`synthetic`, `synthetic-long-first`, `<trace>-e<engines>`) and condition: the short
requests' p95 TTFT with its 95% CI, the long requests' TTFT, tokens/s, how often the rule routed a long
request away, the KV pressure the load created, the p-value against the workload's baseline, and the
interference attribution's counts. `levers` is the synthetic 2x2 (routing x make-room); `decisions`
the routing decisions that moved a request, each with the pressure events that back it.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from typing import Any

import numpy as np

from flatshare.admission.attribution import AttributionConfig, PressureEvent, has_occupancy, pressure_events
from flatshare.admission.evidence import decision_rows, top_events
from flatshare.admission.measures import FAILED_TTFT_S, RunMetrics, run_metrics, slowdown_vs_alone
from flatshare.admission.plan import (
    SHORT_MAX_TOKENS,
    SYNTHETIC_BASELINE,
    SYNTHETIC_CONDITIONS,
    TRACE_BASELINE,
    TRACE_CONDITIONS,
    TRACE_MAKE_ROOM_CONDITIONS,
    TRACE_SAGE_CONDITIONS,
)
from flatshare.admission.results import (
    AdmissionSummary,
    AttributionCounts,
    BaselineTest,
    ConditionResult,
    DecisionRow,
    LeverCell,
    PreferenceTest,
    Slowdown,
    WorkloadResult,
)
from flatshare.admission.runs import SavedRun
from flatshare.admission.synthetic import ALONE
from flatshare.admission.synthetic import MAIN as SYNTHETIC_MAIN
from flatshare.admission.traces import calibrate_from_run
from flatshare.lab.compare import Comparison, mean_ci, paired_bootstrap_p95, paired_over_replicates
from flatshare.lab.stats import bootstrap_ci, paired_ttest, percentile

SUMMARY_VERSION = 1
MAX_DECISION_ROWS = 50  # per workload
Grouped = dict[str, dict[int, SavedRun]]
PREFERENCE = "round-robin"  # the routing the threshold rule (`on`) overrides


def _r(value: float | None, digits: int = 4) -> float | None:
    return None if value is None or not np.isfinite(value) else round(float(value), digits)


ORDER = (
    [c.key for c in SYNTHETIC_CONDITIONS]
    + [ALONE]
    + [c.key for c in TRACE_CONDITIONS + TRACE_MAKE_ROOM_CONDITIONS + TRACE_SAGE_CONDITIONS]
)


def _order(key: str) -> tuple[int, str]:
    """Conditions in the plan's order (unknown ones last, by name)."""
    return (ORDER.index(key), key) if key in ORDER else (len(ORDER), key)


def _p(value: float | None) -> float | None:
    """A p-value to three significant digits (tiny ones stay visible)."""
    return None if value is None else float(f"{value:.3g}")


def _thresholds(grouped: Grouped) -> dict[int, Any]:
    """The threshold rule's thresholds per seed (one entry per seed: every rule condition shares them)."""
    out: dict[int, Any] = {}
    for runs in grouped.values():
        for seed, run in sorted(runs.items()):
            if run.facts["condition"]["routing_policy"] == "threshold" and run.facts["thresholds"]:
                out.setdefault(seed, run.facts["thresholds"])
    return out


def _long_thresholds(part: str, conditions: Grouped) -> dict[int, int | None]:
    """What counts as long, per seed: the hand-set threshold (synthetic) or the window's calibration."""
    if part == "trace":
        return {
            seed: calibrate_from_run(run).thresholds.input_tokens
            for seed, run in conditions[TRACE_BASELINE].items()
        }
    any_runs = next(iter(conditions.values()))
    return {seed: run.facts["long_input_tokens"] for seed, run in any_runs.items()}


def _p95_interval(
    part: str, per_seed: list[float | None], pooled: list[float]
) -> tuple[float | None, tuple[float, float] | None, str]:
    """Traces: the pooled p95 with a bootstrap interval; synthetic: the mean per-seed p95, t-interval."""
    if part == "trace":
        boot = bootstrap_ci(pooled, 95)
        return percentile(pooled, 95), (boot.low, boot.high) if boot else None, "bootstrap over requests"
    valid = [x for x in per_seed if x is not None]
    return (statistics.fmean(valid) if valid else None), mean_ci(valid), "t-interval over seeds"


def _mean_ttlt(part: str, metrics: dict[int, RunMetrics]) -> tuple[float | None, tuple[float, float] | None]:
    """Mean TTLT with its 95% t-interval: over seeds' means for the synthetic case, over the pooled requests
    for traces."""
    seeds = sorted(metrics)
    if part == "trace":
        pooled = [x for s in seeds for x in metrics[s].ttlts.values()]
        return (statistics.fmean(pooled) if pooled else None), mean_ci(pooled)
    per_seed = [m for s in seeds if (m := metrics[s].mean_ttlt_s) is not None]
    return (statistics.fmean(per_seed) if per_seed else None), mean_ci(per_seed)


def _condition(
    part: str,
    runs: dict[int, SavedRun],
    metrics: dict[int, RunMetrics],
    events: dict[int, list[PressureEvent]],
    tests: tuple[BaselineTest, PreferenceTest | None, Slowdown | None, BaselineTest],
    moved: list[DecisionRow],
) -> ConditionResult:
    """One condition from its runs' measures; `tests`: against the baseline, the preference, alone, and
    the mean TTLT against the baseline's."""
    seeds = sorted(metrics)
    ttlt, ttlt_ci = _mean_ttlt(part, metrics)
    per_seed = [metrics[s].short_ttft_p95_s for s in seeds]
    pooled = [x for s in seeds for x in metrics[s].short_ttfts.values()]
    p95, ci, method = _p95_interval(part, per_seed, pooled)
    longs = [x for s in seeds for x in metrics[s].long_ttfts]
    rates = [m.tokens_per_s for m in metrics.values() if m.tokens_per_s is not None]
    eligible = sum(metrics[s].long_decisions for s in seeds)
    routed = [metrics[s].routed_away for s in seeds]
    kv = [x for s in seeds for x in metrics[s].kv_usage]
    counters: dict[str, list[float]] = defaultdict(list)
    for run in runs.values():
        for key, value in run.facts.get("scheduler_counters", {}).items():
            counters[key].append(float(value))
    vs_baseline, vs_preference, slowdown, ttlt_vs_baseline = tests
    return ConditionResult(
        n_runs=len(seeds),
        n_short=len(pooled),
        short_ttft_p95_s=_r(p95),
        short_ttft_p95_ci=(_r(ci[0]), _r(ci[1])) if ci else None,
        ci_method=method,
        per_seed_short_ttft_p95_s=tuple(_r(x) for x in per_seed),
        short_ttft_p50_s=_r(percentile(pooled, 50)),
        short_input_ttft_p95_s=_r(percentile([x for s in seeds for x in metrics[s].short_input_ttfts], 95)),
        short_ttft_max_s=_r(max(pooled) if pooled else None),
        long_requests=len(longs),
        long_ttft_s=_r(statistics.fmean(longs) if longs else None),
        long_ttft_p95_s=_r(percentile(longs, 95)),
        tokens_per_s=_r(statistics.fmean(rates), 2) if rates else None,
        routed_away_n=None if None in routed else sum(x or 0 for x in routed),
        routed_away_frac=None
        if None in routed or not eligible
        else _r(sum(x or 0 for x in routed) / eligible),
        kv_usage_p50=_r(percentile(kv, 50)),
        kv_usage_p95=_r(percentile(kv, 95)),
        kv_usage_max=_r(max(kv) if kv else None),
        waiting_p95=_r(percentile([w for s in seeds for w in metrics[s].waiting], 95), 1),
        preemptions=_r(statistics.fmean(float(r.facts["preemptions"]) for r in runs.values()), 2),
        failed=sum(m.failed for m in metrics.values()),
        make_room={k: _r(statistics.fmean(v), 2) for k, v in sorted(counters.items())},
        attribution=AttributionCounts(
            flagged_shorts=sum(len(e.shorts) for s in seeds for e in events[s]),
            events=sum(len(events[s]) for s in seeds),
            moved=len(moved),
            moved_backed_live=sum(r.live_event is not None for r in moved),
            moved_backed_baseline=sum(bool(r.baseline_events) for r in moved),
        ),
        vs_baseline=vs_baseline,
        vs_round_robin=vs_preference,
        slowdown_vs_alone=slowdown,
        mean_ttlt_s=_r(ttlt),
        mean_ttlt_ci=(_r(ttlt_ci[0]), _r(ttlt_ci[1])) if ttlt_ci else None,
        ttlt_vs_baseline=ttlt_vs_baseline,
    )


def _ttlt_test(part: str, mine: dict[int, RunMetrics], ref: dict[int, RunMetrics]) -> Comparison | None:
    """Mean TTLT against a reference: paired over replicates, or over requests for one trace window."""
    seeds = sorted(set(ref) & set(mine))
    if not seeds:
        return None
    if part == "trace" and len(seeds) < 2:
        a, b = mine[seeds[0]].ttlts, ref[seeds[0]].ttlts
        ids = sorted(set(a) & set(b))
        test = paired_ttest([a[i] for i in ids], [b[i] for i in ids])
        return Comparison(test.p_value, "paired t-test over requests", test.mean_difference, test.t, test.n)
    return paired_over_replicates(
        [mine[s].mean_ttlt_s or 0.0 for s in seeds], [ref[s].mean_ttlt_s or 0.0 for s in seeds]
    )


def _ttlt_vs_baseline(
    part: str, key: str, metrics: dict[str, dict[int, RunMetrics]], baseline: str
) -> BaselineTest:
    test = None if key in (baseline, ALONE) else _ttlt_test(part, metrics[key], metrics.get(baseline, {}))
    if test is None:
        return BaselineTest()
    return BaselineTest(_p(test.p_value), test.method, _r(test.mean_difference_s), _r(test.t), test.n)


def _test(part: str, mine: dict[int, RunMetrics], ref: dict[int, RunMetrics]) -> Comparison | None:
    """This condition against a reference: paired over replicates, or over requests for one trace window."""
    seeds = sorted(set(ref) & set(mine))
    if not seeds:
        return None
    if part == "trace" and len(seeds) < 2:
        return paired_bootstrap_p95(mine[seeds[0]].short_ttfts, ref[seeds[0]].short_ttfts)
    a = [mine[s].short_ttft_p95_s or 0.0 for s in seeds]
    return paired_over_replicates(a, [ref[s].short_ttft_p95_s or 0.0 for s in seeds])


def _vs_baseline(
    part: str, key: str, metrics: dict[str, dict[int, RunMetrics]], baseline: str
) -> BaselineTest:
    """`p_value` etc. against the baseline (empty for the baseline itself and `alone`)."""
    test = None if key in (baseline, ALONE) else _test(part, metrics[key], metrics.get(baseline, {}))
    if test is None:
        return BaselineTest()
    return BaselineTest(_p(test.p_value), test.method, _r(test.mean_difference_s), _r(test.t), test.n)


def _vs_preference(part: str, key: str, metrics: dict[str, dict[int, RunMetrics]]) -> PreferenceTest | None:
    """For `on`: against `round-robin`, the routing the rule overrides (None for the others)."""
    vs = _test(part, metrics[key], metrics[PREFERENCE]) if key == "on" and PREFERENCE in metrics else None
    return None if vs is None else PreferenceTest(_p(vs.p_value), vs.method, _r(vs.mean_difference_s))


def summarize_workload(
    name: str, grouped: Grouped, config: AttributionConfig, alone: dict[int, SavedRun] | None = None
) -> tuple[WorkloadResult, list[DecisionRow]]:
    """One workload's block of the summary (and its moved decisions); `alone`: the shorts run alone."""
    any_run = next(iter(next(iter(grouped.values())).values()))
    part = "trace" if any_run.facts["part"] == "trace" else "synthetic"
    baseline = TRACE_BASELINE if part == "trace" else SYNTHETIC_BASELINE
    long_by_seed = _long_thresholds(part, grouped)
    metrics = {
        k: {s: run_metrics(r, long_by_seed.get(s)) for s, r in runs.items()} for k, runs in grouped.items()
    }
    events = {k: {s: pressure_events(r, config) for s, r in runs.items()} for k, runs in grouped.items()}
    alone_metrics = {s: run_metrics(r, None) for s, r in (alone or {}).items()}
    rows = decision_rows(name, grouped, events, baseline)
    block = {
        k: _condition(
            part,
            grouped[k],
            metrics[k],
            events[k],
            (
                _vs_baseline(part, k, metrics, baseline),
                _vs_preference(part, k, metrics),
                slowdown_vs_alone(metrics[k], alone_metrics) if alone_metrics else None,
                _ttlt_vs_baseline(part, k, metrics, baseline),
            ),
            [r for r in rows if r.condition == k],
        )
        for k in sorted(grouped, key=_order)
    }
    facts = any_run.facts
    result = WorkloadResult(
        part=part,
        engines=facts["engines"]
        if part == "trace"
        else grouped[baseline][min(grouped[baseline])].facts["engines"],
        trace=facts.get("trace"),
        rate=facts.get("rate"),
        replay_s=facts.get("replay_s"),
        baseline=baseline,
        replicates=len(long_by_seed),
        long_input_tokens=dict(sorted(long_by_seed.items())),
        thresholds=_thresholds(grouped),
        thresholds_source="calibrated" if part == "trace" else "hand-set",
        conditions=block,
        top_events=top_events(events.get(baseline, {})),
    )
    return result, rows


LEVER_CELLS = {
    "routing-off/make-room-off": SYNTHETIC_BASELINE,
    "routing-on/make-room-off": "B-controller",
    "routing-off/make-room-on": "make-room",
    "routing-on/make-room-on": "controller+make-room",
}


def _levers(workloads: dict[str, WorkloadResult]) -> dict[str, dict[str, LeverCell]]:
    """The 2x2 (routing x make-room) for each synthetic workload that ran all four cells."""
    out: dict[str, dict[str, LeverCell]] = {}
    for name, w in workloads.items():
        block = w.conditions
        if w.part != "synthetic" or not all(k in block for k in LEVER_CELLS.values()):
            continue
        base = block[SYNTHETIC_BASELINE].short_ttft_p95_s
        cells = {}
        for cell, key in LEVER_CELLS.items():
            m = block[key]
            p95 = m.short_ttft_p95_s
            cells[cell] = LeverCell(
                condition=key,
                short_ttft_p95_s=p95,
                short_ttft_p95_ci=m.short_ttft_p95_ci,
                reduction_s=_r(base - p95) if base is not None and p95 is not None else None,
                long_ttft_s=m.long_ttft_s,
                tokens_per_s=m.tokens_per_s,
                p_value=m.vs_baseline.p_value,
            )
        out[name] = cells
    return out


def summarize(runs: list[SavedRun], config: AttributionConfig | None = None) -> AdmissionSummary:
    """The whole summary from saved runs (module docstring)."""
    config = config or AttributionConfig()
    grouped: dict[str, Grouped] = defaultdict(lambda: defaultdict(dict))
    for run in runs:
        grouped[run.workload][run.condition][run.seed] = run
    if not grouped:
        raise ValueError("no saved runs")
    workloads: dict[str, WorkloadResult] = {}
    rows: list[DecisionRow] = []
    total = 0
    for name in sorted(grouped):
        alone = grouped.get(SYNTHETIC_MAIN, {}).get(ALONE)
        workloads[name], mine = summarize_workload(
            name, grouped[name], config, alone if name.startswith(SYNTHETIC_MAIN) else None
        )
        rows += mine[:MAX_DECISION_ROWS]
        total += len(mine)
    facts = runs[0].facts
    attributed = any(has_occupancy(r) for r in runs if r.facts["part"] != ALONE)
    backends = facts.get("backends")
    return AdmissionSummary(
        version=SUMMARY_VERSION,
        mode=facts.get("mode", "simulated"),
        endpoint=facts.get("endpoint"),
        backends=None if backends is None else tuple(backends),
        model=facts.get("model"),
        attribution_note=None
        if attributed
        else "not computed: the runs have no occupancy data (per-request KV holdings are visible only "
        "inside the engines, not through a gateway)",
        profile=runs[0].facts["profile"],
        short_max_tokens=SHORT_MAX_TOKENS,
        failed_ttft_s=FAILED_TTFT_S,
        attribution_config=config,
        workloads=workloads,
        levers=_levers(workloads),
        decisions=tuple(rows),
        decisions_total=total,
    )
