"""The write-up's table beside flatshare's: each figure the write-up reports, what this experiment measured,
and what kind of row it is.

Seed figures are from `shared/seeds/000` (2 callers, 24 agents, voice at top priority, 512-token steps unless
a row says otherwise). Every row has a `RowKind`:
- `fitted`: enters the seed fit's loss (`flatshare.colocation.fit_loss`); only the stock-vLLM rows read from
  `FIT_CONDITIONS` (`alone` and `vllm-priority`) may be, and a `SeedRow` refuses to be fitted otherwise;
- `calibrated`: not in the loss, but pinned by a profile or preset choice made to match it (the voice-alone
  first-token wait by the 0.06 s API pass, the voice-alone first-sentence decode by the profile's per-token
  time), so it is no test of the simulator and is left out of the prediction count;
- `prediction`: neither; the rows that test the simulator.

A row is a hit when flatshare is within 25% of the seed; the two shares of turns over target (stock and
T=48) within 10 points, as the issue that set these tolerances asks (a small share, such as 1 in 14 over
10 s, is held to 25%). A turn row (a voice turn's time, which includes the fixed voice pipeline outside the
engine, `voice_pipeline_fixed_s`) is judged on its engine time instead, the turn less that pipeline on
both sides: 25% of a total that includes a fixed 1.25 s is loose on the engine's part.

Rows that read one condition's voice figure also carry flatshare's 95% interval, resampling whole calls
(`ConditionResult.voice_call_ci`). A hit is judged on the figure alone; the interval says whether a miss
could be this experiment's sampling noise. The seed gives no intervals and does not say how many turns
each of its figures pools.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Literal, Protocol

from flatshare.colocation.results import ConditionResult, SeedComparisonRow

if TYPE_CHECKING:
    from flatshare.colocation.results import ColocationSummary

RELATIVE_TOLERANCE = 0.25
SHARE_TOLERANCE = 0.10
FIT_CONDITIONS = ("alone", "vllm-priority")
"""The only conditions the seed fit runs and its loss reads."""


@dataclass(frozen=True)
class Read:
    """One condition a seed row reads: at the experiment's first (smallest) caller count, or at every caller
    count it holds (`every_caller_count`). What `flatshare.colocation.table_plan` runs for the table."""

    condition: str
    every_caller_count: bool = False


class Getter(Protocol):
    """A seed row's figure from a summary (None when the runs lack it), and the conditions it reads."""

    @property
    def reads(self) -> tuple[Read, ...]: ...

    def __call__(self, s: ColocationSummary, /) -> float | None: ...


Format = Literal["g", "pct", "one_in", "x"]  # how a figure is shown: 3 digits, a percentage, 1 in N, a factor
_FIELDS = {f.name for f in dataclasses.fields(ConditionResult)}


class RowKind(StrEnum):
    FITTED = "fitted"
    CALIBRATED = "calibrated"
    PREDICTION = "prediction"


@dataclass(frozen=True)
class SeedRow:
    """One figure of the seed's table. `share`: a share of turns over target, compared in points, not as a
    ratio. `turn`: a voice turn's time, judged on its engine time (less the fixed pipeline). `said`: the
    seed's own words for its figure, shown instead of the number; `fmt`: how figures are shown.

    ValueError when a fitted row reads anything but one figure of one of `FIT_CONDITIONS`."""

    row: str
    seed: float
    get: Getter
    kind: RowKind = RowKind.PREDICTION
    share: bool = False
    turn: bool = False
    said: str = ""
    fmt: Format = "g"

    def __post_init__(self) -> None:
        if self.kind is RowKind.FITTED and not (
            isinstance(self.get, _Field) and self.get.condition in FIT_CONDITIONS
        ):
            raise ValueError(f"seed table: fitted row {self.row!r} must read one figure of {FIT_CONDITIONS}")


@dataclass(frozen=True)
class _Field:
    """A getter of one condition's figure (2 callers); also finds its interval (`ConditionResult.voice_call_ci`)."""

    condition: str
    field: str

    def __post_init__(self) -> None:
        if self.field not in _FIELDS:
            raise ValueError(f"seed table: {self.field!r} is not a field of ConditionResult")

    @property
    def reads(self) -> tuple[Read, ...]:
        return (Read(self.condition),)

    def __call__(self, s: ColocationSummary) -> float | None:
        m = s.conditions.get(self.condition)
        return None if m is None else getattr(m, self.field)

    def ci(self, s: ColocationSummary) -> tuple[float, float] | None:
        m = s.conditions.get(self.condition)
        found = None if m is None else m.voice_call_ci.get(self.field)
        return None if found is None else (float(found[0]), float(found[1]))


def _m(condition: str, field: str) -> Getter:
    return _Field(condition, field)


@dataclass(frozen=True)
class _Ratio:
    """One getter's figure over another's."""

    a: Getter
    b: Getter

    @property
    def reads(self) -> tuple[Read, ...]:
        return (*self.a.reads, *self.b.reads)

    def __call__(self, s: ColocationSummary) -> float | None:
        x, y = self.a(s), self.b(s)
        return None if x is None or not y else x / y


def _ratio(a: Getter, b: Getter) -> Getter:
    return _Ratio(a, b)


@dataclass(frozen=True)
class _Nth:
    """The median time to the `n`th token of a reply of at least `n` tokens (2 callers)."""

    condition: str
    n: int

    @property
    def reads(self) -> tuple[Read, ...]:
        return (Read(self.condition),)

    def __call__(self, s: ColocationSummary) -> float | None:
        m = s.conditions.get(self.condition)
        return None if m is None else m.nth_token_median(self.n)


def _nth(condition: str, n: int) -> Getter:
    return _Nth(condition, n)


@dataclass(frozen=True)
class _PooledOverTarget:
    """Share of turns over target pooled over every caller count the runs hold (the seed's 16 of 720 pools its
    rounds at 2, 4 and 6 callers). Each caller count's target is `alone`'s p95 there, so it reads `alone` at
    every caller count too."""

    condition: str

    @property
    def reads(self) -> tuple[Read, ...]:
        return (Read(self.condition, every_caller_count=True), Read("alone", every_caller_count=True))

    def __call__(self, s: ColocationSummary) -> float | None:
        blocks = [b.conditions.get(self.condition) for b in s.by_callers.values()]
        found = [b for b in blocks if b is not None and b.n_voice_turns]
        if not found:
            return None
        return sum(b.voice_over_target_turns for b in found) / sum(b.n_voice_turns for b in found)


def _pooled_over_target(condition: str) -> Getter:
    return _PooledOverTarget(condition)


F, C = RowKind.FITTED, RowKind.CALIBRATED
SEED_ROWS = (
    SeedRow(
        "stock vLLM (priority): voice turn p95 s",
        10.48,
        _m("vllm-priority", "voice_turn_p95_s"),
        F,
        turn=True,
    ),
    SeedRow("stock vLLM: voice turn median s", 4.61, _m("vllm-priority", "voice_turn_p50_s"), F, turn=True),
    SeedRow(
        "stock vLLM: turns over target",
        0.90,
        _m("vllm-priority", "voice_over_target_frac"),
        F,
        True,
        fmt="pct",
    ),
    SeedRow(
        "stock vLLM: turns over 10 s", 1 / 14, _m("vllm-priority", "voice_over_10s_frac"), F, fmt="one_in"
    ),
    SeedRow("stock vLLM: mean wait for the first token s", 2.81, _m("vllm-priority", "voice_ttft_mean_s"), F),
    SeedRow(
        "stock vLLM: mean time to decode the first sentence s",
        1.07,
        _m("vllm-priority", "stage_first_sentence_mean_s"),
        F,
    ),
    SeedRow("voice alone: turn p95 s", 1.8, _m("alone", "voice_turn_p95_s"), F, turn=True),
    SeedRow("voice alone: mean wait for the first token s", 0.09, _m("alone", "voice_ttft_mean_s"), C),
    SeedRow(
        "voice alone: mean time to decode the first sentence s",
        0.22,
        _m("alone", "stage_first_sentence_mean_s"),
        C,
    ),
    SeedRow(
        "preemption only: mean wait for the first token s", 0.78, _m("make-room-preempt", "voice_ttft_mean_s")
    ),
    SeedRow("preemption only: voice turn p95 s", 5.1, _m("make-room-preempt", "voice_turn_p95_s"), turn=True),
    SeedRow("make-room T=16: voice turn p95 s", 3.1, _m("make-room-t16", "voice_turn_p95_s"), turn=True),
    SeedRow("make-room T=48: voice turn p95 s", 2.24, _m("make-room-t48", "voice_turn_p95_s"), turn=True),
    SeedRow("make-room T=48: voice turn median s", 1.96, _m("make-room-t48", "voice_turn_p50_s"), turn=True),
    SeedRow(
        "make-room T=48: turns over target",
        0.32,
        _m("make-room-t48", "voice_over_target_frac"),
        share=True,
        fmt="pct",
    ),
    SeedRow("make-room T=48: agent throughput vs stock", 0.97, _m("make-room-t48", "agent_throughput_ratio")),
    SeedRow(
        "make-room T=48: agents' slowest first token vs stock",
        1.0,
        _ratio(_m("make-room-t48", "agent_ttft_max_s"), _m("vllm-priority", "agent_ttft_max_s")),
        said="about the same",
        fmt="x",
    ),
    SeedRow("40th token of a 40-token reply, T=16 (median) s", 3.76, _nth("make-room-t16", 40)),
    SeedRow("40th token of a 40-token reply, T=48 (median) s", 1.04, _nth("make-room-t48", 40)),
    SeedRow(
        "256-token steps: turns over target vs 512 (T=48)",
        0.5,
        _ratio(
            _m("make-room-t48-256", "voice_over_target_frac"), _m("make-room-t48", "voice_over_target_frac")
        ),
        said="halved",
        fmt="x",
    ),
    SeedRow(
        "256-token steps: agent throughput vs 512 (T=48)",
        0.93,
        _ratio(_m("make-room-t48-256", "agent_tokens_per_s"), _m("make-room-t48", "agent_tokens_per_s")),
    ),
    SeedRow(
        "decode hold: agent throughput vs T=48 without it",
        1 - 0.038,
        _ratio(_m("make-room-t48-decode", "agent_tokens_per_s"), _m("make-room-t48", "agent_tokens_per_s")),
    ),
    SeedRow(
        "every fix (T=48, decode hold, 256-token steps), 2, 4 and 6 callers: turns over target",
        16 / 720,
        _pooled_over_target("make-room-t48-256-decode"),
        said="16 of 720 (2.2%)",
        fmt="pct",
    ),
)
SEED_ROW_BY_NAME = {r.row: r for r in SEED_ROWS}


def table_reads(rows: Sequence[SeedRow] = SEED_ROWS) -> dict[str, bool]:
    """Every condition `rows` read, in the order they first appear, and whether at every caller count (else
    only at the first)."""
    out: dict[str, bool] = {}
    for row in rows:
        for read in row.get.reads:
            out[read.condition] = out.get(read.condition, False) or read.every_caller_count
    return out


def _within(row: SeedRow, value: float, seed: float) -> bool:
    if row.share:
        return abs(value - seed) <= SHARE_TOLERANCE
    return abs(value - seed) <= RELATIVE_TOLERANCE * abs(seed)


def _hit(
    row: SeedRow, judged: float | None, against: float, spread: tuple[float, float] | None
) -> bool | None:
    """Within tolerance of the figure; with a spread, inside it or within tolerance of either end."""
    if judged is None:
        return None
    if spread is None:
        return _within(row, judged, against)
    low, high = spread
    return low <= against <= high or _within(row, low, against) or _within(row, high, against)


Spreads = Mapping[str, tuple[float, float]]


def spreads_over(
    summary: ColocationSummary, near_optimal: Sequence[ColocationSummary]
) -> dict[str, tuple[float, float]]:
    """Each row's range over `summary` and `near_optimal` (the same plan run at the other points of the seed
    fit's near-optimal set: every setup whose loss is within the noise of the best, `tools/seed_fit.py
    spread`), by row name; a row `summary` lacks has none, and a run that lacks a row is left out of it."""
    out: dict[str, tuple[float, float]] = {}
    for row in SEED_ROWS:
        found = [row.get(s) for s in (summary, *near_optimal)]
        values = [float(v) for v in found if v is not None]
        if found[0] is not None:
            out[row.row] = (round(min(values), 4), round(max(values), 4))
    return out


def seed_comparison(
    summary: ColocationSummary, spreads: Spreads | None = None
) -> tuple[SeedComparisonRow, ...]:
    """One entry per seed row; `flatshare`, `ratio` and `hit` are None when the run lacks the condition.
    Turn rows carry their engine time (less `summary.voice_pipeline_fixed_s`, seed and flatshare) and are
    judged on it. A row with a spread (`spreads_over`) carries it (`spread_low`, `spread_high`) and is a hit
    when the source document's figure lies inside it or within tolerance of either end."""
    out = []
    pipeline = summary.voice_pipeline_fixed_s
    for row in SEED_ROWS:
        value = row.get(summary)
        ci = row.get.ci(summary) if isinstance(row.get, _Field) and value is not None else None
        spread = None if spreads is None or value is None else spreads.get(row.row)
        seed_engine = engine = None
        judged_spread = spread
        if row.turn:
            seed_engine = round(row.seed - pipeline, 4)
            engine = None if value is None else round(float(value) - pipeline, 4)
            judged_spread = None if spread is None else (spread[0] - pipeline, spread[1] - pipeline)
        judged, against = (engine, seed_engine) if seed_engine is not None else (value, row.seed)
        out.append(
            SeedComparisonRow(
                row=row.row,
                seed=round(row.seed, 4),
                flatshare=None if value is None else round(float(value), 4),
                ratio=None if value is None else round(float(value) / row.seed, 3),
                kind=row.kind,
                hit=_hit(row, None if judged is None else float(judged), against, judged_spread),
                ci=ci,
                seed_engine_s=seed_engine,
                engine_s=engine,
                spread_low=None if spread is None else spread[0],
                spread_high=None if spread is None else spread[1],
            )
        )
    return tuple(out)


@dataclass(frozen=True)
class SeedBaseline:
    """What the first seed reports for one alternative to make-room (2 callers, tuned vLLM p95 10.48 s).

    `p95_low_s`/`p95_high_s`: the range its slowest turns fell in, when the seed gives one; `said`: its words.
    """

    said: str
    p95_low_s: float | None = None
    p95_high_s: float | None = None


SEED_BASELINES = {
    "leaseholder": SeedBaseline(
        "slowest turns about 11 s, a little worse than vLLM without it; its throttle never deferred a "
        "request; all it did was shorten every voice reply",
        10.5,
        11.5,
    ),
    "agent-cap": SeedBaseline("slowest turns between 8.6 and 12.1 s", 8.6, 12.1),
    "sglang-preempt": SeedBaseline("slowest turns between 8.6 and 12.1 s (SGLang's own engine)", 8.6, 12.1),
    "flow-control": SeedBaseline("slowest turns between 8.6 and 12.1 s (llm-d's flow control)", 8.6, 12.1),
    "reserve-voice": SeedBaseline("halved the tail, still missed the target by more than 3 s", 5.0, 5.5),
    "abort-resubmit": SeedBaseline(
        "tail about 2.5 s, by throwing work away; agents' slowest first-token wait 106 s -> 193 s", 2.2, 2.8
    ),
}
"""Seed text: `shared/seeds/000`, the paragraphs after Leaseholder's. The ranges read "about 11" as
10.5-11.5, "about 2.5" as 2.2-2.8 and "halved the tail" of 10.48 s as 5.0-5.5 s."""
