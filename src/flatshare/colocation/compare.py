"""Two co-location experiments side by side, and the conclusions that flip between them.

Built for the step-model question (docs/step-model.md): the same plan run under two profiles (the additive
`llama3-8b-24gb` and the roofline `llama3-8b-24gb-roofline`), so that every headline can be read under both
and a conclusion that rests on the model is called out. It works for any two experiments of the same
plan; `setup_differences` says what differs between them.

A *conclusion* is a yes/no statement read from one summary (`conclusions`): each row's hit in the write-up's table, and
per caller count and make-room condition whether it has fewer turns over target than stock vLLM
(`vllm-priority`), whether its voice p95 is within the target, whether the agents keep 97% of stock's
token rate, and whether its agents' slowest first token is within 1.2x stock's (the bounds of the
co-location goal, docs/experiments.md). A flip is a conclusion that is true in one experiment and false in
the other; a conclusion one side cannot read (a condition it did not run) is not a flip.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from flatshare.colocation.results import ColocationSummary, ConditionResult, SeedComparisonRow
from flatshare.colocation.seed_markdown import row_format, seed_shown, shown

STOCK = "vllm-priority"
AGENTS_KEEP = 0.97  # agents' token rate against stock that the co-location goal asks for
SLOWEST_FIRST_TOKEN = 1.2  # agents' slowest first-token wait against stock that the goal allows


@dataclass(frozen=True)
class Flip:
    """One conclusion that differs: `a` and `b` are its truth in the first and second experiment."""

    conclusion: str
    a: bool
    b: bool


def setup_differences(a: ColocationSummary, b: ColocationSummary) -> dict[str, tuple[object, object]]:
    """Setup fields whose values differ, as (a's, b's); a field one side lacks counts as None."""
    sa, sb = dict(a.setup or {}), dict(b.setup or {})
    return {k: (sa.get(k), sb.get(k)) for k in sorted(set(sa) | set(sb)) if sa.get(k) != sb.get(k)}


def _condition_conclusions(
    key: str, m: ConditionResult, stock: ConditionResult | None, target_s: float | None
) -> dict[str, bool]:
    out: dict[str, bool] = {}
    if m.voice_turn_p95_s is not None and target_s is not None:
        out[f"{key}: voice turn p95 within target"] = m.voice_turn_p95_s <= target_s
    if stock is None or key == STOCK:
        return out
    if m.voice_over_target_frac is not None and stock.voice_over_target_frac is not None:
        out[f"{key}: fewer turns over target than stock"] = (
            m.voice_over_target_frac < stock.voice_over_target_frac
        )
    if m.agent_throughput_ratio is not None:
        out[f"{key}: agents keep >= {AGENTS_KEEP:.0%} of stock's rate"] = (
            m.agent_throughput_ratio >= AGENTS_KEEP
        )
    if m.agent_ttft_max_s is not None and stock.agent_ttft_max_s:
        out[f"{key}: agents' slowest first token <= {SLOWEST_FIRST_TOKEN}x stock"] = (
            m.agent_ttft_max_s <= SLOWEST_FIRST_TOKEN * stock.agent_ttft_max_s
        )
    return out


def conclusions(summary: ColocationSummary) -> dict[str, bool]:
    """Every yes/no headline of one experiment, keyed by a sentence (the module docstring)."""
    out = {f"write-up row hit: {row.row}": row.hit for row in summary.seed_comparison if row.hit is not None}
    for n, block in summary.by_callers.items():
        stock = block.conditions.get(STOCK)
        for key, m in block.conditions.items():
            for sentence, truth in _condition_conclusions(key, m, stock, block.target_s).items():
                out[f"{n} callers, {sentence}"] = truth
    return out


def flips(a: ColocationSummary, b: ColocationSummary) -> list[Flip]:
    """The conclusions both experiments can read that differ, in a's order."""
    ca, cb = conclusions(a), conclusions(b)
    return [Flip(k, ca[k], cb[k]) for k in ca if k in cb and ca[k] != cb[k]]


def _fmt(value: float | None, kind: str) -> str:
    if value is None:
        return "-"
    return f"{value:.1%}" if kind == "share" else f"{value:.3g}"


HEADLINE_FIELDS: tuple[tuple[str, str, str], ...] = (
    ("voice p95 s", "voice_turn_p95_s", "s"),
    ("turns over target", "voice_over_target_frac", "share"),
    ("voice first token s", "voice_ttft_mean_s", "s"),
    ("agents vs stock", "agent_throughput_ratio", "ratio"),
    ("agents' slowest first token s", "agent_ttft_max_s", "s"),
)


def _headline_lines(a: ColocationSummary, b: ColocationSummary, la: str, lb: str) -> list[str]:
    header = " | ".join(f"{name} ({la} / {lb})" for name, _, _ in HEADLINE_FIELDS)
    lines: list[str] = []
    for n in [c for c in a.callers if c in b.by_callers]:
        ma: Mapping[str, ConditionResult] = a.by_callers[n].conditions
        mb: Mapping[str, ConditionResult] = b.by_callers[n].conditions
        lines += [
            f"### {n} callers",
            "",
            f"| condition | {header} |",
            "|---|" + "---|" * len(HEADLINE_FIELDS),
        ]
        for key in [k for k in ma if k in mb]:
            cells = [
                f"{_fmt(getattr(ma[key], f), kind)} / {_fmt(getattr(mb[key], f), kind)}"
                for _, f, kind in HEADLINE_FIELDS
            ]
            lines.append(f"| {key} | " + " | ".join(cells) + " |")
        lines.append("")
    return lines


def _cell(row: SeedComparisonRow | None) -> str:
    if row is None or row.flatshare is None:
        return "-"
    text = shown(row.flatshare, row_format(row.row))
    return text if row.engine_s is None else f"{text} (engine {row.engine_s:.3g})"


def _hit(row: SeedComparisonRow | None) -> str:
    if row is None or row.hit is None:
        return "-"
    return "yes" if row.hit else "**no**"


def _seed_lines(a: ColocationSummary, b: ColocationSummary, la: str, lb: str) -> list[str]:
    rows_b = {r.row: r for r in b.seed_comparison}
    lines = [
        f"| row | kind | write-up | {la} | hit | {lb} | hit |",
        "|---|---|---|---|---|---|---|",
    ]
    for ra in a.seed_comparison:
        rb = rows_b.get(ra.row)
        seed = seed_shown(ra) + ("" if ra.seed_engine_s is None else f" (engine {ra.seed_engine_s:.3g})")
        lines.append(
            f"| {ra.row} | {ra.kind} | {seed} | {_cell(ra)} | {_hit(ra)} | {_cell(rb)} | {_hit(rb)} |"
        )
    return lines


def render(a: ColocationSummary, b: ColocationSummary, label_a: str, label_b: str) -> list[str]:
    """The side-by-side page as markdown lines: setup differences, flips, the seed table, the headlines."""
    diffs = setup_differences(a, b)
    changed = flips(a, b)
    lines = [f"# {label_a} beside {label_b}", ""]
    lines += [
        "Setup differences: "
        + (", ".join(f"`{k}` {va} / {vb}" for k, (va, vb) in diffs.items()) if diffs else "none")
        + ".",
        "",
        f"## Conclusions that flip ({len(changed)} of {len(set(conclusions(a)) & set(conclusions(b)))})",
        "",
    ]
    if changed:
        lines += [f"| conclusion | {label_a} | {label_b} |", "|---|---|---|"]
        lines += [
            f"| {f.conclusion} | {'yes' if f.a else 'no'} | {'yes' if f.b else 'no'} |" for f in changed
        ]
    else:
        lines.append("None: every conclusion both can read holds under both.")
    lines += ["", "## The write-up's table", "", *_seed_lines(a, b, label_a, label_b), ""]
    lines += ["## Every condition at every caller count", "", *_headline_lines(a, b, label_a, label_b)]
    return lines


def label(summary: ColocationSummary, folder: Path) -> str:
    """A column's name: the step-time profile when the setup records one, else the folder's name."""
    profile = (summary.setup or {}).get("profile")
    return str(profile) if profile else folder.name
