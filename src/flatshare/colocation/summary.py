"""Summary of a co-location experiment, computed from saved runs only, as typed results
(`flatshare.colocation.results`); `summary.json` is `ColocationSummary.to_json()`.

`summary.json` schema (version 2; version 1's seed rows had `fitted` where 2 has `kind`): `version`, `target_s` and `conditions` for the first (smallest)
caller count, and `by_callers.<n>` with `target_s` and `conditions` for each caller count. Under
`conditions.<key>`: `n_runs`, `n_voice_turns`, `voice_failed_turns`, `voice_turn_p50_s`,
`voice_turn_p95_s`, `voice_turn_p95_ci` ([low, high], 95% bootstrap over turns), `voice_turn_p99_s`,
`voice_call_ci` (95% intervals, resampling whole calls, of the figures the seed's table compares: keyed
by field, e.g. `voice_over_10s_frac`: [low, high]),
`voice_over_target_frac`, `voice_over_target_turns`, `voice_over_10s_frac` (turns over 10 s of silence),
`voice_ttft_mean_s`, `voice_first_sentence_mean_s` (send to end of first
sentence), `stage_waiting_mean_s`, `stage_prefill_mean_s`, `stage_first_sentence_mean_s`,
`first_sentence_gap_p50_s`, `first_sentence_gap_p95_s`, `agent_tokens_per_s` (agent output tokens
inside the run's duration per second, mean over seeds), `agent_throughput_ratio` (to `vllm-priority`),
`agent_throughput_ratio_alone` (to `agents-alone`), `agent_ttft_p95_s`, `agent_ttft_max_s`,
`preemptions` (mean per run), `make_room` (make-room's counters, mean per run), `baseline_counters` (a
baseline's counters, mean per run: an engine-side baseline scheduler's and a gateway-side baseline's,
`flatshare.policy.gates`; empty for stock vLLM), `per_seed_voice_p95_s`,
`paired_vs_vllm_priority` (`mean_difference_s`, `t`, `p_value`, `n`), `nth_token_median_s` and
`nth_token_p95_s` (median and p95 time from send to the n-th output token, n = 1..40, over replies at
least n long), `seed_comparison` (the first seed's table beside these figures, `flatshare.colocation.seed_table`:
per row `row`, `seed`, `flatshare`, `ratio`, `ci`, `kind` (`fitted`, `calibrated` or `prediction`), `hit`, and
for voice-turn rows `seed_engine_s` and `engine_s`, the turn less the fixed voice pipeline, on which they are
judged; `spread_low` and `spread_high`, the row's range over the seed fit's near-optimal set when the
experiment folder holds its runs under `spread/`, else null), `ablation` (make-room's variants beside
the variant below each, `flatshare.colocation.ablation`: per row `callers`, `condition`, `below`, `adds`,
`over_target` with `over_target_ci` and `over_target_delta`, `turn_p95_s` and `turn_p95_delta_s`,
`agent_rate` (to `vllm-priority`) and `agent_rate_delta`, `agent_wait` (agents' slowest first-token wait
over `vllm-priority`'s), and the goal's verdicts `meets_over_target`, `meets_p95`, `meets_agent_rate`,
`meets_agent_wait`, `meets_goal`: true, false, or null where the runs cannot judge),
`voice_wait_parts_mean_s` (mean seconds of each turn's time before its first token by part,
`flatshare.sim.waits.WAIT_PARTS`, over turns with a first token and a ledger; the parts add up to
`voice_wait_total_mean_s`, the mean time to first token of the same turns) and `voice_wait_kv_share`
(the share of that total spent waiting for KV memory: `kv_memory` + `kv_behind_load`). `setup`: the runs'
`flatshare.colocation.setup.Setup`, when they share one; else null. `engine`: what the runs ran on, when
they share it (`kind` `sim` with its `profile`, or `vllm` with `model`, `device`, `hardware`,
`vllm_version` and `notes`; and `scale`); absent for runs that predate it. Without `alone` runs there is no
target: `target_s` and the shares over it are null. Voice turns count a failed or refused turn as 30 s (see `flatshare.listen.voice`).
"""

from __future__ import annotations

import dataclasses
import statistics
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from flatshare import jsonin
from flatshare.colocation.ablation import ablation_rows
from flatshare.colocation.results import CallerResult, ColocationSummary, ConditionResult, PairedComparison
from flatshare.colocation.runs import SavedRun
from flatshare.colocation.seed_table import seed_comparison, spreads_over
from flatshare.errors import InputError
from flatshare.lab.stats import bootstrap_ci, cluster_bootstrap_ci, paired_ttest, percentile
from flatshare.listen.voice import VoicePipeline, turn_stages
from flatshare.sim.waits import WAIT_PARTS

SUMMARY_VERSION = 2
TARGET_MARGIN_S = 0.25
BASELINE = "vllm-priority"
NTH_TOKENS = 40
LONG_SILENCE_S = 10.0


def _round(value: float | None, digits: int = 4) -> float | None:
    return None if value is None else round(float(value), digits)


def _mean(values: list[float]) -> float | None:
    return statistics.fmean(values) if values else None


def _agent_rate(run: SavedRun) -> float:
    duration = float(run.engine["duration_s"])
    tokens = sum(1 for r in run.records if r.cls == "agent" for t in r.token_times_s if t <= duration)
    return tokens / duration


def _nth_token(voice: list[Any], q: float) -> list[float | None]:
    """The q-th percentile of the time from send to the n-th token, n = 1..40, over replies >= n long."""
    out: list[float | None] = []
    for n in range(1, NTH_TOKENS + 1):
        times = [
            r.token_times_s[n - 1] - r.send_s for r in voice if r.status == "ok" and len(r.token_times_s) >= n
        ]
        out.append(_round(percentile(times, q)))
    return out


def wait_parts(voice: list[Any]) -> dict[str, Any]:
    """Mean time before the first token by part, its total, and the KV-memory share of it."""
    ledgers = [r.wait_s for r in voice if r.status == "ok" and r.wait_s]
    if not ledgers:
        return {"voice_wait_parts_mean_s": None, "voice_wait_total_mean_s": None, "voice_wait_kv_share": None}
    parts = {p: statistics.fmean(w.get(p, 0.0) for w in ledgers) for p in WAIT_PARTS}
    total = sum(parts.values())
    return {
        "voice_wait_parts_mean_s": {p: _round(v) for p, v in parts.items()},
        "voice_wait_total_mean_s": _round(total),
        "voice_wait_kv_share": _round((parts["kv_memory"] + parts["kv_behind_load"]) / total)
        if total > 0
        else None,
    }


def call_cis(
    runs: list[SavedRun], target_s: float | None, pipeline: VoicePipeline
) -> dict[str, tuple[float, float]]:
    """95% confidence intervals of the voice figures the seed's table compares, resampling whole calls (a
    run's voice session: its turns are not independent; `cluster_bootstrap_ci`). Keyed by the
    `ConditionResult` field each interval belongs to; a figure with fewer than 2 calls is left out."""
    turns: dict[tuple[int, str], list[float]] = defaultdict(list)
    ttfts: dict[tuple[int, str], list[float]] = defaultdict(list)
    sentences: dict[tuple[int, str], list[float]] = defaultdict(list)
    for run in runs:
        for r in run.records:
            if r.cls != "voice":
                continue
            call = (run.seed, r.session_id)
            turns[call].append(pipeline.turn_latency(r))
            if r.ttft_s is not None:
                ttfts[call].append(r.ttft_s)
            stages = turn_stages(r)
            if stages is not None:
                sentences[call].append(stages.first_sentence_s)
    by_turn = [np.asarray(t) for t in turns.values()]
    figures: dict[str, tuple[list[Any], float | None]] = {
        "voice_turn_p50_s": (by_turn, 50.0),
        "voice_turn_p95_s": (by_turn, 95.0),
    }
    if target_s is not None:  # else no `alone` runs: no target
        figures["voice_over_target_frac"] = ([(t > target_s).astype(float) for t in by_turn], None)
    figures |= {
        "voice_over_10s_frac": ([(t > LONG_SILENCE_S).astype(float) for t in by_turn], None),
        "voice_ttft_mean_s": (list(ttfts.values()), None),
        "stage_first_sentence_mean_s": (list(sentences.values()), None),
    }
    out: dict[str, tuple[float, float]] = {}
    for name, (groups, q) in figures.items():
        ci = cluster_bootstrap_ci(groups, q)
        if ci is not None:
            out[name] = (round(ci.low, 4), round(ci.high, 4))
    return out


def _mean_counters(runs: list[SavedRun], name: str) -> dict[str, float | None]:
    """The mean per run of each counter in the runs' `engine.json` `name` (a run without one counts 0)."""
    keys = sorted({k for run in runs for k in run.engine.get(name, {})})
    return {k: _round(statistics.fmean(run.engine.get(name, {}).get(k, 0) for run in runs), 2) for k in keys}


def condition_metrics(
    runs: list[SavedRun], target_s: float | None, pipeline: VoicePipeline
) -> ConditionResult:
    """Metrics of one condition at one caller count, pooled over its seeds (comparisons not yet added);
    with no target (`target_s` None: no `alone` runs) the shares over target are None."""
    voice = [r for run in runs for r in run.records if r.cls == "voice"]
    agents = [r for run in runs for r in run.records if r.cls == "agent"]
    turns = [pipeline.turn_latency(r) for r in voice]
    stages = [s for s in (turn_stages(r) for r in voice) if s is not None]
    gaps = [g for s in stages for g in s.gaps_s]
    ci = bootstrap_ci(turns) if turns else None
    agent_ttfts = [r.ttft_s for r in agents if r.ttft_s is not None]
    counters = _mean_counters(runs, "scheduler_counters")
    gate_counters = _mean_counters(runs, "gate_counters")
    make_room = runs[0].engine.get("engine_config", {}).get("scheduler") == "make-room"
    return ConditionResult(
        n_runs=len(runs),
        n_voice_turns=len(voice),
        voice_failed_turns=sum(r.status != "ok" for r in voice),
        voice_turn_p50_s=_round(percentile(turns, 50)),
        voice_turn_p95_s=_round(percentile(turns, 95)),
        voice_turn_p95_ci=(_round(ci.low), _round(ci.high)) if ci else None,
        voice_turn_p99_s=_round(percentile(turns, 99)),
        voice_over_target_frac=_over(turns, target_s),
        voice_over_10s_frac=_round(sum(t > LONG_SILENCE_S for t in turns) / len(turns)) if turns else None,
        voice_over_target_turns=0 if target_s is None else sum(t > target_s for t in turns),
        voice_ttft_mean_s=_round(_mean([r.ttft_s for r in voice if r.ttft_s is not None])),
        voice_first_sentence_mean_s=_round(
            _mean([r.first_sentence_s - r.send_s for r in voice if r.first_sentence_s is not None])
        ),
        stage_waiting_mean_s=_round(_mean([s.waiting_s for s in stages])),
        stage_prefill_mean_s=_round(_mean([s.prefill_s for s in stages])),
        stage_first_sentence_mean_s=_round(_mean([s.first_sentence_s for s in stages])),
        first_sentence_gap_p50_s=_round(percentile(gaps, 50)),
        first_sentence_gap_p95_s=_round(percentile(gaps, 95)),
        agent_tokens_per_s=_round(_mean([_agent_rate(run) for run in runs]) if agents else None),
        agent_ttft_p95_s=_round(percentile(agent_ttfts, 95)),
        agent_ttft_max_s=_round(max(agent_ttfts) if agent_ttfts else None),
        preemptions=_round(_mean([float(run.engine["preemptions"]) for run in runs]), 2),
        make_room=counters if make_room else {},
        baseline_counters=gate_counters if make_room else counters | gate_counters,
        per_seed_voice_p95_s=tuple(
            _round(percentile([pipeline.turn_latency(r) for r in run.records if r.cls == "voice"], 95))
            for run in sorted(runs, key=lambda run: run.seed)
        ),
        nth_token_median_s=tuple(_nth_token(voice, 50)),
        nth_token_p95_s=tuple(_nth_token(voice, 95)),
        voice_call_ci=call_cis(runs, target_s, pipeline),
        step_ledger=_mean_counters(runs, "step_ledger"),
        kv_ledger=_mean_counters(runs, "kv_ledger")
        if all(run.engine.get("kv_ledger") for run in runs)
        else {},
        **wait_parts(voice),
    )


def _over(turns: list[float], target_s: float | None) -> float | None:
    if not turns or target_s is None:
        return None
    return _round(sum(t > target_s for t in turns) / len(turns))


def _paired(seeds: tuple[float | None, ...], base_seeds: tuple[float | None, ...]) -> PairedComparison | None:
    if not base_seeds or len(seeds) != len(base_seeds) or None in seeds + base_seeds:
        return None
    test = paired_ttest(
        [float(s) for s in seeds if s is not None], [float(s) for s in base_seeds if s is not None]
    )
    return PairedComparison(
        mean_difference_s=_round(test.mean_difference),
        t=_round(test.t),
        p_value=_round(test.p_value, 6),
        n=test.n,
    )


def _ratio(rate: float | None, reference: ConditionResult | None) -> float | None:
    ref_rate = reference.agent_tokens_per_s if reference is not None else None
    return _round(rate / ref_rate) if rate is not None and ref_rate else None


def _add_comparisons(conditions: dict[str, ConditionResult]) -> dict[str, ConditionResult]:
    """Each condition with its agent throughput ratios and its paired test against `BASELINE`."""
    base, alone = conditions.get(BASELINE), conditions.get("agents-alone")
    base_seeds = base.per_seed_voice_p95_s if base is not None else ()
    return {
        key: dataclasses.replace(
            m,
            agent_throughput_ratio=_ratio(m.agent_tokens_per_s, base),
            agent_throughput_ratio_alone=_ratio(m.agent_tokens_per_s, alone),
            paired_vs_vllm_priority=_paired(m.per_seed_voice_p95_s, base_seeds),
        )
        for key, m in conditions.items()
    }


def summarize(
    runs: list[SavedRun],
    pipeline: VoicePipeline | None = None,
    setup: dict[str, Any] | None = None,
    engine: dict[str, Any] | None = None,
    near_optimal: Sequence[ColocationSummary] = (),
) -> ColocationSummary:
    """The whole summary (see the module docstring) from saved runs, with make-room's ablation
    (`flatshare.colocation.ablation`); `setup` and `engine` are recorded
    as given. `near_optimal`: the same plan's summaries at the other points of the seed fit's near-optimal
    set, whose range each row of the write-up's table carries (`flatshare.colocation.seed_table.spreads_over`)."""
    pipeline = pipeline or VoicePipeline()
    grouped: dict[int, dict[str, list[SavedRun]]] = defaultdict(lambda: defaultdict(list))
    for run in runs:
        grouped[run.callers][run.condition].append(run)
    if not grouped:
        raise InputError("no saved runs (runs/<condition>/c<callers>/s<seed>)")
    first_callers = min(grouped)
    shared = grouped[first_callers].get("agents-alone", [])
    by_callers: dict[int, CallerResult] = {}
    for callers, conditions in sorted(grouped.items()):
        if shared and "agents-alone" not in conditions:
            conditions["agents-alone"] = shared
        alone = conditions.get("alone")
        target: float | None = None
        if alone:  # without it (a short real-engine plan) there is no target: shares over it are None
            turns = [pipeline.turn_latency(r) for run in alone for r in run.records if r.cls == "voice"]
            if not turns:
                raise InputError(
                    f"callers={callers}: the 'alone' condition has no voice turn to set the target"
                )
            target = float(np.percentile(turns, 95)) + TARGET_MARGIN_S
        metrics = {key: condition_metrics(rs, target, pipeline) for key, rs in sorted(conditions.items())}
        by_callers[callers] = CallerResult(_round(target), _add_comparisons(metrics))
    summary = ColocationSummary(
        version=SUMMARY_VERSION,
        voice_pipeline_fixed_s=pipeline.fixed_s,
        callers=tuple(sorted(grouped)),
        by_callers=by_callers,
        setup=setup,
        engine=engine,
    )
    spreads = spreads_over(summary, near_optimal) if near_optimal else None
    return dataclasses.replace(
        summary, seed_comparison=seed_comparison(summary, spreads), ablation=ablation_rows(summary)
    )


def load_summary(path: Path) -> ColocationSummary:
    """A `summary.json` (version 1 or 2) as written, its seed rows and ablation derived again from its
    measurements by today's tables (so an older file reads with today's row kinds and tolerances), with the spreads the
    file's rows carry."""
    data = jsonin.read_object(path)
    try:
        summary = ColocationSummary.from_json(data)
        spreads = {
            row["row"]: (float(row["spread_low"]), float(row["spread_high"]))
            for row in data.get("seed_comparison", [])
            if row.get("spread_low") is not None and row.get("spread_high") is not None
        }
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise InputError(f"{path}: not a co-location summary.json ({type(exc).__name__}: {exc})") from exc
    return dataclasses.replace(
        summary, seed_comparison=seed_comparison(summary, spreads), ablation=ablation_rows(summary)
    )
