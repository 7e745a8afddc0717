"""`report.md` of an admission experiment, and rebuilding summary + report + figures from saved runs."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from flatshare import safeout
from flatshare.admission import figures
from flatshare.admission.attribution import AttributionConfig, live_event, pressure_events
from flatshare.admission.results import (
    AdmissionSummary,
    ConditionResult,
    DecisionRow,
    EventSummary,
    Skipped,
)
from flatshare.admission.runs import SavedRun, load_runs
from flatshare.admission.summary import summarize
from flatshare.errors import InputError
from flatshare.lab.compare import RESAMPLES
from flatshare.runfiles.files import read_json


def _p_cell(p: float | None, method: str | None) -> str:
    """A p-value; a bootstrap p at its resolution floor reads `<0.001`."""
    if p is not None and (method or "").startswith("paired bootstrap") and p <= 1 / RESAMPLES:
        return f"<{2 / RESAMPLES:.3g}"
    return _cell(p)


COLUMNS: tuple[tuple[str, Callable[[ConditionResult], str]], ...] = (
    ("short TTFT p95 s", lambda m: _cell(m.short_ttft_p95_s)),
    ("95% CI", lambda m: _cell(m.short_ttft_p95_ci)),
    ("p vs baseline", lambda m: _p_cell(m.vs_baseline.p_value, m.vs_baseline.p_value_method)),
    ("mean TTLT s", lambda m: _cell(m.mean_ttlt_s)),
    ("TTLT 95% CI", lambda m: _cell(m.mean_ttlt_ci)),
    ("TTLT p vs baseline", lambda m: _p_cell(m.ttlt_vs_baseline.p_value, m.ttlt_vs_baseline.p_value_method)),
    ("short-input p95 s", lambda m: _cell(m.short_input_ttft_p95_s)),
    ("long TTFT s", lambda m: _cell(m.long_ttft_s)),
    ("tok/s", lambda m: _cell(m.tokens_per_s)),
    ("routed away", lambda m: _cell(m.routed_away_frac)),
    ("KV p95", lambda m: _cell(m.kv_usage_p95)),
    ("waiting p95", lambda m: _cell(m.waiting_p95)),
    ("failed", lambda m: _cell(m.failed)),
)


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, list | tuple):
        return "-".join(_cell(v) for v in value)
    if isinstance(value, float):
        return f"{value:.3g}" if abs(value) < 0.01 and value != 0 else f"{value:.3f}"
    return str(value)


def _slow_cell(m: ConditionResult) -> str:
    s = m.slowdown_vs_alone
    return "-" if s is None else f"{s.median:.1f}x / {s.max:.0f}x"


def _table(conditions: Mapping[str, ConditionResult]) -> list[str]:
    labels = " | ".join(label for label, _ in COLUMNS)
    lines = [f"| condition | {labels} | vs alone (median / max) | slowed shorts | events |"]
    lines.append("|---" * (len(COLUMNS) + 4) + "|")
    for key, m in conditions.items():
        a = m.attribution
        cells = " | ".join(cell(m) for _, cell in COLUMNS)
        lines.append(f"| {key} | {cells} | {_slow_cell(m)} | {a.flagged_shorts} | {a.events} |")
    return lines


def _synthetic(summary: AdmissionSummary, long_tokens: int = 50_000) -> list[str]:
    block = summary.workloads.get("synthetic")
    if block is None:
        return []
    c = block.conditions
    a, b = c.get("A-fcfs-one-engine"), c.get("B-controller")
    lines = [f"## 1. Synthetic: one {long_tokens:,}-token request beside ten short ones", ""]
    if a and b:
        lines += [
            f"**Run A** (all on engine 1, FCFS): mean p95 TTFT of the shorts {_cell(a.short_ttft_p95_s)} s, "
            f"95% CI {_cell(a.short_ttft_p95_ci)} s. **Run B** (controller on): {_cell(b.short_ttft_p95_s)} s, "
            f"95% CI {_cell(b.short_ttft_p95_ci)} s. Paired t-test over {b.vs_baseline.n_pairs} seeds: "
            f"p = {_cell(b.vs_baseline.p_value)} (mean difference {_cell(b.vs_baseline.mean_difference_s)} s). "
            f"The rule moved the long request in {_cell(b.routed_away_frac)} of the seeds.",
            "",
        ]
    lines += [*_table(c), ""]
    if "sage" in c:
        lines += [
            "`sage`, `controller+sage`: sage inside each engine (a SageSched-style Gittins-index order over "
            "predicted costs, flatshare's reconstruction after arXiv 2603.07917's abstract; "
            "docs/baselines-engine.md), FCFS otherwise, alone and behind the controller. `mean TTLT`: every "
            "request's time to last token (SageSched's own metric), mean over seeds, paired t-test over seeds.",
            "",
        ]
    alone = c.get("alone")
    if alone:
        lines += [
            f"Each short alone on an idle engine: TTFT p50 {_cell(alone.short_ttft_p50_s)} s, "
            f"max {_cell(alone.short_ttft_max_s)} s (mean of per-seed p95 {_cell(alone.short_ttft_p95_s)} s).",
            "",
        ]
    first = summary.workloads.get("synthetic-long-first")
    if first:
        lines += [
            "Control, the seed's literal order (the long request first, on an idle cluster): no KV rule can fire "
            "(the preferred engine holds no KV when the long request arrives).",
            "",
            *_table(first.conditions),
            "",
        ]
    return [*lines, "![synthetic](synthetic.png)", ""]


def _traces(summary: AdmissionSummary) -> list[str]:
    names = [n for n, w in summary.workloads.items() if w.part == "trace"]
    if not names:
        return []
    lines = [
        "## 2. Real traces",
        "",
        "Conditions: `off` = vLLM behind a plain load balancer (a uniformly random backend per request, as "
        "kube-proxy's iptables mode picks one); `on` = the threshold rule over round-robin, thresholds "
        "calibrated on the first 20% of the `off` run; `round-robin`, `least-kv`, `least-waiting` as the "
        "gateway implements them. Results cover short requests sent in the last 80% of each window. "
        "`short-input p95`: the same requests less those whose input is long (above the calibrated input "
        "threshold); make-room ranks requests by input, protects these and holds long-input ones back, so "
        "where the two columns part, long-input requests with short replies are paying. `off+sage`, "
        "`on+sage`: the same routing with sage inside each engine (a SageSched-style Gittins-index order "
        "over predicted costs, flatshare's reconstruction after arXiv 2603.07917's abstract; "
        "docs/baselines-engine.md). `mean TTLT`: every request of the evaluation window, time to last "
        "token (SageSched's own metric), t-interval over requests and a paired t-test over requests.",
        "",
    ]
    for name in names:
        w = summary.workloads[name]
        longs = ", ".join(str(v) for v in w.long_input_tokens.values())
        lines += [
            f"### {name}: {w.engines} engines, rate x{_cell(w.rate)}, {_cell(w.replay_s)} s replayed "
            f"per window, {w.replicates} window(s); long = input above {longs} tokens",
            "",
            *_table(w.conditions),
            "",
        ]
        on = w.conditions.get("on")
        vs = on.vs_round_robin if on is not None else None
        if vs is not None:
            p_cell = _p_cell(vs.p_value, vs.method)
            p_text = p_cell if p_cell.startswith("<") else f"= {p_cell}"
            lines += [
                f"`on` against its own preference `round-robin`: p95 difference (on minus round-robin) "
                f"{_cell(vs.mean_difference_s)} s, p {p_text} ({vs.method}).",
                "",
            ]
    return [*lines, "![traces](traces.png)", ""]


def _event_cell(e: EventSummary) -> str:
    who = ", ".join(x.request_id for x in e.responsible) or "nobody"
    return f"{e.engine} {e.start_s}-{e.end_s} s: {len(e.shorts)} shorts up to x{e.worst_slowdown}, by {who}"


def _decision_row(r: DecisionRow) -> str:
    live = _event_cell(r.live_event) if r.live_event else "none"
    base = "; ".join(_event_cell(e) for e in r.baseline_events[:2]) or "none"
    cells = (
        r.workload,
        r.condition,
        r.seed,
        f"{r.t:.2f}",
        r.request_id,
        r.input_tokens,
        f"{r.from_engine} -> {r.to}",
        _cell(r.kv_usage_seen),
        live,
        base,
    )
    return "| " + " | ".join(str(c) for c in cells) + " |"


def _attribution(summary: AdmissionSummary) -> list[str]:
    note = summary.attribution_note
    if note:
        return ["## 3. Interference attribution", "", f"{note[0].upper()}{note[1:]}.", ""]
    cfg = summary.attribution_config
    rows = summary.decisions
    lines = [
        "## 3. Interference attribution",
        "",
        f"A short request is slowed when its TTFT exceeds {cfg.slowdown} x its expected TTFT alone (its "
        f"prefill priced by the step-time profile) + {cfg.margin_s} s. Overlapping slowed shorts on one "
        "engine form a pressure event; the requests holding the largest time-averaged share of the engine's "
        "KV over it are responsible. A decision that moved a request away is backed *live* if an event was in "
        "progress on the engine it left, and by the *baseline* if, in the baseline run, that request caused one.",
        "",
        "| workload | condition | moved away | backed live | backed by the baseline |",
        "|---|---|---|---|---|",
    ]
    for name, w in summary.workloads.items():
        for key, m in w.conditions.items():
            a = m.attribution
            if a.moved:
                lines.append(
                    f"| {name} | {key} | {a.moved} | {a.moved_backed_live} | {a.moved_backed_baseline} |"
                )
    lines += ["", "Examples (at most three per workload):", ""]
    lines += [
        "| workload | condition | seed | t s | request | input | from -> to | KV seen | live event | baseline events |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    shown: dict[str, int] = {}
    for r in rows:
        if shown.get(r.workload, 0) >= 3:
            continue
        shown[r.workload] = shown.get(r.workload, 0) + 1
        lines.append(_decision_row(r))
    lines += ["", "Largest pressure events in each baseline (which requests were responsible):", ""]
    lines += [
        "| workload | seed | engine | window s | shorts | worst slowdown | responsible (KV share) |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, w in summary.workloads.items():
        for top in w.top_events[:3]:
            e = top.event
            who = ", ".join(f"{x.request_id} ({x.kv_share:.1%})" for x in e.responsible)
            lines.append(
                f"| {name} | {top.seed} | {e.engine} | {e.start_s}-{e.end_s} | {top.n_shorts} | {e.worst_slowdown} | {who} |"
            )
    return [*lines, "", "![attribution](attribution.png)", ""]


def _levers(summary: AdmissionSummary) -> list[str]:
    levers = summary.levers
    if not levers:
        return []
    lines = [
        "## 4. Both levers: routing across engines x make-room inside each (synthetic)",
        "",
        "make-room runs with vLLM's priority policy; shorts have priority 1 (protected), the long request 10.",
        "",
    ]
    for name, cells in levers.items():
        lines += [
            f"### {name}",
            "",
            "| cell | condition | short p95 s | 95% CI | cut vs A s | long TTFT s | tok/s | p vs A |",
        ]
        lines.append("|---|---|---|---|---|---|---|---|")
        for cell, m in cells.items():
            values = (
                m.short_ttft_p95_s,
                m.short_ttft_p95_ci,
                m.reduction_s,
                m.long_ttft_s,
                m.tokens_per_s,
                m.p_value,
            )
            lines.append(f"| {cell} | {m.condition} | " + " | ".join(_cell(v) for v in values) + " |")
        lines.append("")
    return [*lines, "![levers](levers.png)", ""]


def _endpoint_intro(summary: AdmissionSummary, plan: dict[str, Any]) -> list[str]:
    """The header of a report of runs against a running gateway: where, what ran, what did not and why."""
    synth = plan.get("synthetic", {})
    skipped = summary.skipped or Skipped((), None)
    lines = [
        "# Admission control: routing long requests away from KV pressure (against a running gateway)",
        "",
        f"Gateway `{summary.endpoint}`, backends {', '.join(f'`{b}`' for b in summary.backends or ())}, "
        f"model `{summary.model}`; wall-clock replay through the gateway, its routing switched per condition "
        f"with `PUT /gateway/routing` and restored at the end. Synthetic sizes: long request "
        f"{synth.get('long_tokens')} input / {synth.get('long_max_tokens')} output tokens; shorts "
        f"{synth.get('short_prompt')} input tokens, up to {synth.get('short_max_tokens')} output. Short = at most "
        f"{summary.short_max_tokens} output tokens; a short request that never got a token counts as "
        f"{summary.failed_ttft_s} s. Every number below is computed from the saved runs in `runs/`.",
        "",
    ]
    if plan.get("sage_endpoint"):
        sage_backends = ", ".join(f"`{b}`" for b in plan.get("sage_backends") or ())
        lines += [
            f"- The sage conditions ran through a second gateway, `{plan['sage_endpoint']}` (backends "
            f"{sage_backends}, running sage), with the same workloads, seeds and routing switches.",
            "",
        ]
    for item in skipped.conditions:
        lines += [f"- Skipped condition `{item.key}`: {item.why}.", ""]
    if skipped.traces:
        lines += [f"- Real traces: {skipped.traces}.", ""]
    return lines


def write_report(out: Path, summary: AdmissionSummary, plan: dict[str, Any]) -> None:
    if summary.mode == "endpoint":
        long_tokens = int(plan.get("synthetic", {}).get("long_tokens", 50_000))
        lines = _endpoint_intro(summary, plan)
        lines += (
            _synthetic(summary, long_tokens) + _traces(summary) + _attribution(summary) + _levers(summary)
        )
        safeout.write_text(out / "report.md", "\n".join(lines) + "\n")
        return
    engine = plan.get("engine", {})
    lines = [
        "# Admission control: routing long requests away from KV pressure (simulated cluster)",
        "",
        f"Profile `{summary.profile}` (derived from spec sheets, not measured); engines: vLLM's own "
        f"scheduler, `max_num_batched_tokens` {engine.get('max_num_batched_tokens')}, `max_num_seqs` "
        f"{engine.get('max_num_seqs')}, {engine.get('kv_tokens')} KV tokens. Short = at most "
        f"{summary.short_max_tokens} output tokens; a short request that never got a token counts as "
        f"{summary.failed_ttft_s} s. Every number below is computed from the saved runs in `runs/`.",
        "",
    ]
    lines += _synthetic(summary) + _traces(summary) + _attribution(summary) + _levers(summary)
    safeout.write_text(out / "report.md", "\n".join(lines) + "\n")


def _attribution_panels(runs: list[SavedRun], config: AttributionConfig) -> list[figures.Panel]:
    panels: list[figures.Panel] = []
    for key in ("A-fcfs-one-engine", "B-controller"):
        run = next(
            (r for r in runs if r.workload == "synthetic" and r.condition == key and r.seed == 0), None
        )
        if run is not None:
            panels.append((f"synthetic {key} s0", run, pressure_events(run, config), None))
    best: tuple[int, figures.Panel] | None = None
    for run in (r for r in runs if r.facts["part"] == "trace" and r.condition == "on"):
        events = pressure_events(run, config)
        backed = [d for d in run.decisions if d.moved and live_event(d, events) is not None]
        if backed and (best is None or len(backed) > best[0]):
            t = backed[0].t
            best = (
                len(backed),
                (f"{run.workload} on s{run.seed}", run, events, (max(0.0, t - 15.0), t + 15.0)),
            )
    if best is not None:
        panels.append(best[1])
    return panels


def build_report(out: Path, config: AttributionConfig | None = None) -> AdmissionSummary:
    """(Re)build summary.json, report.md and the figures from `out/runs` alone."""
    config = config or AttributionConfig()
    runs = load_runs(out)
    summary = summarize(runs, config)
    marker = out / "experiment.json"
    plan = read_json(marker).get("plan", {}) if marker.is_file() else {}
    if not isinstance(plan, dict):
        raise InputError(f"{marker}: plan must be a table")
    if summary.mode == "endpoint":
        skipped = plan.get("skipped")
        summary = dataclasses.replace(
            summary, skipped=None if skipped is None else Skipped.from_json(skipped)
        )
    safeout.write_text(out / "summary.json", json.dumps(summary.to_json(), indent=2, sort_keys=True) + "\n")
    figures.synthetic_figure(summary, out / "synthetic.png")
    figures.traces_figure(summary, out / "traces.png")
    figures.levers_figure(summary, out / "levers.png")
    figures.attribution_figure(_attribution_panels(runs, config), out / "attribution.png")
    write_report(out, summary, plan)
    return summary
