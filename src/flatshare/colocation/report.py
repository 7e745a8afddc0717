"""`report.md` for a co-location experiment, and rebuilding summary + report + figures from saved runs."""

from __future__ import annotations

import itertools
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from flatshare import safeout
from flatshare.colocation import figures, frontier
from flatshare.colocation.ablation_markdown import ablation_lines, how_to_read
from flatshare.colocation.engine_words import engine_lines, engine_words, shared_fact
from flatshare.colocation.goal import GOAL
from flatshare.colocation.kv_markdown import kv_lines
from flatshare.colocation.results import ColocationSummary, ConditionResult
from flatshare.colocation.runs import SavedRun, load_runs, run_dir
from flatshare.colocation.seed_markdown import seed_counts_line, seed_table_lines
from flatshare.colocation.seed_table import SEED_BASELINES
from flatshare.colocation.setup import unstated_lines
from flatshare.colocation.steps_markdown import steps_lines
from flatshare.colocation.summary import BASELINE, summarize
from flatshare.listen.voice import VoicePipeline
from flatshare.sim.waits import WAIT_PARTS

COLUMNS = (
    ("voice_turn_p50_s", "turn p50 s"),
    ("voice_turn_p95_s", "turn p95 s"),
    ("voice_turn_p99_s", "turn p99 s"),
    ("voice_over_target_frac", "over target"),
    ("voice_failed_turns", "failed"),
    ("voice_ttft_mean_s", "TTFT mean s"),
    ("voice_first_sentence_mean_s", "1st sentence mean s"),
    ("first_sentence_gap_p50_s", "gap p50 s"),
    ("agent_tokens_per_s", "agent tok/s"),
    ("agent_throughput_ratio", "agent vs priority"),
    ("agent_ttft_max_s", "agent TTFT max s"),
    ("preemptions", "preemptions"),
)


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.3f}"
    return str(value)


def _ordered(conditions: Mapping[str, ConditionResult]) -> list[str]:
    order = [*figures.MAIN_ORDER, "agents-alone", *(key for _, key in figures.SWEEP)]
    return sorted(conditions, key=lambda k: (order.index(k) if k in order else len(order), k))


def _table(conditions: Mapping[str, ConditionResult]) -> list[str]:
    lines = ["| condition | " + " | ".join(label for _, label in COLUMNS) + " | p95 95% CI | p vs priority |"]
    lines.append("|---" * (len(COLUMNS) + 3) + "|")
    for key in _ordered(conditions):
        m = conditions[key]
        ci = m.voice_turn_p95_ci
        p_value = m.paired_vs_vllm_priority.p_value if m.paired_vs_vllm_priority else None
        cells = [_cell(getattr(m, field)) for field, _ in COLUMNS]
        ci_cell = f"{ci[0]:.2f}-{ci[1]:.2f}" if ci else "-"
        lines.append(f"| {key} | " + " | ".join(cells) + f" | {ci_cell} | {_cell(p_value)} |")
    return lines


def _share(value: float | None) -> str:
    return "-" if value is None else f"{value:.1%}"


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _goal(summary: ColocationSummary) -> list[str]:
    lines = [
        f"Goal (`flatshare.colocation.goal`): every voice turn within target (turns over it at most "
        f"{GOAL.over_target_points * 100:g} point above `alone`'s at the same caller count, turn p95 within "
        f"it) while the agents keep at least {GOAL.agent_rate:.0%} of `{BASELINE}`'s token rate and their "
        f"slowest first-token wait is at most {GOAL.agent_wait_factor:g}x stock's.",
        "",
    ]
    for callers in summary.callers:
        block = summary.by_callers[callers]
        rows = [r for r in summary.ablation if r.callers == callers and r.condition != BASELINE]
        if not rows or block.target_s is None:
            continue
        meeting = [f"`{r.condition}`" for r in rows if r.meets_goal]
        shown = next((r for r in rows if r.condition == "make-room-t48"), rows[0])
        lines.append(
            f"- {callers} callers (target {block.target_s:.2f} s): `{shown.condition}` p95 "
            f"{_seconds(shown.turn_p95_s)} s, {_share(shown.over_target)} over, agents at "
            f"{_cell(shown.agent_rate)} of `{BASELINE}`. Variants meeting the goal: "
            + (", ".join(meeting) if meeting else "**none**")
            + "."
        )
    return lines


def _ablation(summary: ColocationSummary) -> list[str]:
    """make-room's ablation at each caller count, and the frontier figure beside it."""
    if not summary.ablation:
        return []
    lines = ["## make-room's ablation, and the frontier", "", how_to_read(), ""]
    for callers in summary.callers:
        table = ablation_lines(summary.ablation, callers)
        if table:
            block = summary.by_callers[callers]
            alone = block.conditions.get("alone")
            heading = f"### {callers} callers (target {_seconds(block.target_s)} s, `alone` " + (
                f"{_share(alone.voice_over_target_frac)} over)" if alone else "not run)"
            )
            lines += [heading, "", *table, ""]
    figure = "![frontier: agents' token rate against voice turns over target](frontier.png)"
    return [*lines, figure, "", frontier.CAPTION, ""]


def _ordering(summary: ColocationSummary) -> list[str]:
    """Whether the seed's ordering holds, explained from counters and stages when it does not."""
    c = summary.conditions
    keys = ("vllm-priority", "make-room-preempt", "make-room-t16", "make-room-t48")
    if not all(k in c for k in keys):
        return []
    p95 = [c[k].voice_turn_p95_s or 0.0 for k in keys]
    holds = all(a > b for a, b in itertools.pairwise(p95))
    line = (
        "The seed's ordering (vllm-priority > make-room-preempt > make-room-t16 > make-room-t48, voice p95): "
        + " > ".join(f"{v:.2f} s" for v in p95)
        + (": **holds**." if holds else ": **does not hold** strictly.")
    )
    pre, base = c["make-room-preempt"], c["vllm-priority"]
    fired = pre.make_room.get("preemptions_for_waiting", 0)
    note = (
        f" Preemption for waiting turns fired {fired} times per run; the voice turns' mean wait before their "
        f"first step went from {_cell(base.stage_waiting_mean_s)} s to {_cell(pre.stage_waiting_mean_s)} s, "
        f"and decoding the first sentence took {_cell(pre.stage_first_sentence_mean_s)} s against "
        f"{_cell(c['make-room-t48'].stage_first_sentence_mean_s)} s with the T=48 hold: most of the lost "
        "time is in steps that carry agent prefill, which only the hold removes."
    )
    return [line + note]


def _waits(conditions: Mapping[str, ConditionResult]) -> list[str]:
    """Where each condition's voice turns spent the time before their first token (mean seconds)."""
    keys = [k for k in _ordered(conditions) if conditions[k].voice_wait_parts_mean_s]
    if not keys:
        return []
    lines = [
        "Where a voice turn's time before its first token goes (mean seconds a turn; `flatshare.sim.waits`). "
        "The parts add up to the measured mean time to the first token (`total`).",
        "",
        "| condition | " + " | ".join(WAIT_PARTS) + " | total | measured TTFT | KV share |",
        "|---" * (len(WAIT_PARTS) + 4) + "|",
    ]
    for key in keys:
        m = conditions[key]
        parts = m.voice_wait_parts_mean_s or {}
        cells = " | ".join(_cell(parts[p]) for p in WAIT_PARTS)
        share = m.voice_wait_kv_share
        lines.append(
            f"| {key} | {cells} | {_cell(m.voice_wait_total_mean_s)} | {_cell(m.voice_ttft_mean_s)} | "
            + ("-" if share is None else f"{share:.0%}")
            + " |"
        )
    return lines


def _fired(counters: Mapping[str, float | None]) -> str:
    """The counters that moved (mean per run), or `never fired`."""
    traffic = ("arrived", "sent")  # what passed through, not what the mechanism did
    moved = [
        f"{k} {v:,.0f}" if v >= 100 else f"{k} {v:g}"
        for k, v in counters.items()
        if v and k not in traffic and not k.startswith(("max_", "events_"))
    ]
    return ", ".join(moved[:5]) if moved else "**never fired**"


def _baselines(summary: ColocationSummary) -> list[str]:
    """Each baseline beside the first seed's words for it, with the counters that show it acted."""
    c, base = summary.conditions, summary.conditions.get(BASELINE)
    keys = [k for k in SEED_BASELINES if k in c]
    if not keys:
        return []
    lines = [
        "## Baselines: what the first seed tried instead",
        "",
        "Each at its best setting of a small sweep (`flatshare.colocation.experiment.BEST_SETTING`), on the "
        f'same requests as `{BASELINE}` and `make-room-t48`. The seed\'s "slowest turns" is compared with '
        "the voice turn p95.",
        "",
        "| baseline | seed | turn p95 s | over target | agent tok/s vs priority | agents' slowest TTFT s (vs "
        "priority) | in the seed's range | what fired (mean per run) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for key in [*keys, BASELINE, "make-room-t48"]:
        m = c.get(key)
        if m is None:
            continue
        seed = SEED_BASELINES.get(key)
        slowest = m.agent_ttft_max_s
        ratio = (
            f" ({slowest / base.agent_ttft_max_s:.2f}x)" if slowest and base and base.agent_ttft_max_s else ""
        )
        inside = "-"
        if seed is not None and seed.p95_low_s is not None and m.voice_turn_p95_s is not None:
            inside = "yes" if seed.p95_low_s <= m.voice_turn_p95_s <= (seed.p95_high_s or 0) else "**no**"
        counters = m.baseline_counters or m.make_room
        lines.append(
            f"| `{key}` | {seed.said if seed else '-'} | {_cell(m.voice_turn_p95_s)} | "
            f"{_cell(m.voice_over_target_frac)} | {_cell(m.agent_throughput_ratio)} | {_cell(slowest)}{ratio} | "
            f"{inside} | {_fired(counters) if seed else '-'} |"
        )
    return [*lines, ""]


def _seed(summary: ColocationSummary) -> list[str]:
    rows = summary.seed_comparison
    if not rows:
        return []
    return ["## The first seed's table", "", seed_counts_line(rows), "", *seed_table_lines(rows), ""]


def write_report(
    out: Path, summary: ColocationSummary, plan_line: str, heard: list[str] | None = None
) -> None:
    lines = [f"# Co-location: a voice agent beside coding agents ({engine_words(summary.engine)})", ""]
    lines += [plan_line, "", *engine_lines(summary.engine)]
    target = (
        "Target = `alone` turn p95 + 0.25 s."
        if summary.target_s is not None
        else "No `alone` runs: no target, and no shares of turns over it."
    )
    lines += [
        f"{target} Turn latency = {summary.voice_pipeline_fixed_s:.2f} s of fixed "
        "voice pipeline + the engine's time to the end of the first sentence; failed turns count as 30 s.",
        "",
    ]
    lines += [*_goal(summary), "", *_ordering(summary), ""]
    if summary.setup:
        lines += ["## Setup", "", *unstated_lines(dict(summary.setup)), ""]
    lines += _ablation(summary)
    lines += _seed(summary)
    lines += _baselines(summary)
    lines += [*_waits(summary.conditions), ""]
    lines += steps_lines(summary)
    lines += kv_lines(summary)
    for callers, block in summary.by_callers.items():
        lines += [
            f"## {callers} callers (target {block.target_s or 0.0:.2f} s)",
            "",
            *_table(block.conditions),
            "",
        ]
    lines += heard or []
    lines += [
        "## Figures",
        "",
        "![tail per condition](tail.png)",
        "",
        "![window sweep](window_sweep.png)",
        "",
        "![stages](stages.png)",
        "",
        "![turn latency CDF](cdf.png)",
        "",
        "![KV use](kv.png)",
        "",
        "Counters (mean per run) show which mechanism fired: "
        + ", ".join(
            f"`{k}`: {m.make_room.get('preemptions_for_waiting', 0)} preemptions for waiting, "
            f"{m.make_room.get('hold_steps', 0)} hold steps"
            for k, m in summary.conditions.items()
            if m.make_room
        )
        + ".",
    ]
    safeout.write_text(out / "report.md", "\n".join(lines) + "\n")


def _shared_setup(runs: list[SavedRun]) -> dict[str, Any] | None:
    setups = {json.dumps(run.engine.get("setup"), sort_keys=True) for run in runs}
    return json.loads(setups.pop()) if len(setups) == 1 else None


SPREAD_FOLDER = "spread"


def _near_optimal(out: Path, pipeline: VoicePipeline) -> list[ColocationSummary]:
    """The summaries of `out/spread/<point>/runs`: the same plan at the other points of the seed fit's
    near-optimal set (`tools/seed_fit.py spread` writes them); none when the folder is absent."""
    folder = out / SPREAD_FOLDER
    if not folder.is_dir():
        return []
    points = sorted(p for p in folder.iterdir() if (p / "runs").is_dir())
    return [summarize(load_runs(p), pipeline) for p in points]


def build_report(out: Path) -> ColocationSummary:
    """(Re)build summary.json, report.md and the figures from `out/runs` alone."""
    runs = load_runs(out)
    setup = shared_fact(runs, "setup")
    pipeline = VoicePipeline(asr_final_spread=float((setup or {}).get("asr_final_spread", 0.0)))
    summary = summarize(
        runs,
        pipeline,
        setup=setup,
        engine=shared_fact(runs, "engine"),
        near_optimal=_near_optimal(out, pipeline),
    )
    safeout.write_text(out / "summary.json", json.dumps(summary.to_json(), indent=2, sort_keys=True) + "\n")
    figures.tail_figure(summary, out / "tail.png")
    figures.sweep_figure(summary, out / "window_sweep.png")
    figures.stages_figure(summary, out / "stages.png")
    figures.cdf_figure(runs, summary, pipeline, out / "cdf.png")
    figures.kv_figure(runs, summary, out / "kv.png")
    frontier.frontier_figure(summary, out / "frontier.png")
    seeds = len({r.seed for r in runs})
    plan_line = f"{len(runs)} runs: caller counts {list(summary.callers)}, {seeds} seeds per condition."
    write_report(out, summary, plan_line, render_worst_turn(out, runs, summary.callers[0], pipeline))
    return summary


HEARD = ("vllm-priority", "make-room-t48")


def render_worst_turn(
    out: Path, runs: list[SavedRun], callers: int, pipeline: VoicePipeline | None = None
) -> list[str]:
    """Render the slowest `vllm-priority` voice turn at `callers` (over the seeds both conditions of `HEARD`
    ran) beside the same turn under `make-room-t48`, as `out/worst-turn.wav` and `.png`
    (`flatshare.listen`); returns the report's lines linking them, or saying why there are none."""
    from flatshare.listen.render import render_pair
    from flatshare.listen.speech import missing_tools
    from flatshare.listen.timeline import load_voice_run, worst_turn

    stock, make_room = HEARD
    seeds = [{r.seed for r in runs if r.condition == key and r.callers == callers} for key in HEARD]
    common = sorted(seeds[0] & seeds[1])
    if not common:
        return []
    missing = missing_tools()
    if missing:
        return [f"No rendered call: {', '.join(missing)} not installed (`make system-deps`).", ""]
    worst = [
        (worst_turn(load_voice_run(run_dir(out, stock, callers, seed)), pipeline), seed) for seed in common
    ]
    turn, seed = max(worst, key=lambda pair: pair[0].wait_s)
    render_pair(run_dir(out, stock, callers, seed), run_dir(out, make_room, callers, seed), turn, out)
    return [
        "## Hear the slowest stock turn",
        "",
        f"The slowest `{stock}` voice turn at {callers} callers (seed {seed}, caller line {turn.caller}, "
        f"call {turn.call}, turn {turn.turn}: {turn.wait_s:.1f} s from the end of the caller's speech to the "
        f"reply's first audio) in the left channel, and the same turn under `{make_room}` in the right: "
        "[worst-turn.wav](worst-turn.wav) (`flatshare listen`).",
        "",
        "![the slowest stock turn beside make-room](worst-turn.png)",
        "",
    ]
