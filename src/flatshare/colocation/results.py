"""The co-location experiment's results as typed, frozen objects; `summary.json` is their `to_json()`.

`flatshare.colocation.summary` builds them from saved runs; the report, the figures and the seed table read
them by attribute. Field meanings are listed in `flatshare.colocation.summary`'s docstring (the schema of
`summary.json`); each field's JSON key is its name. `None` means "not measured in these runs" (no turn,
no agent, no baseline to compare with).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

Seconds = float | None


@dataclass(frozen=True)
class PairedComparison:
    """A paired t-test of per-seed voice-turn p95s against the stock-priority condition."""

    mean_difference_s: Seconds
    t: float | None
    p_value: float | None
    n: int


@dataclass(frozen=True)
class ConditionResult:
    """One condition at one caller count, pooled over its seeds."""

    n_runs: int
    n_voice_turns: int
    voice_failed_turns: int
    voice_turn_p50_s: Seconds
    voice_turn_p95_s: Seconds
    voice_turn_p95_ci: tuple[Seconds, Seconds] | None
    voice_turn_p99_s: Seconds
    voice_over_target_frac: float | None
    voice_over_10s_frac: float | None
    voice_over_target_turns: int
    voice_ttft_mean_s: Seconds
    voice_first_sentence_mean_s: Seconds
    stage_waiting_mean_s: Seconds
    stage_prefill_mean_s: Seconds
    stage_first_sentence_mean_s: Seconds
    first_sentence_gap_p50_s: Seconds
    first_sentence_gap_p95_s: Seconds
    agent_tokens_per_s: float | None
    agent_ttft_p95_s: Seconds
    agent_ttft_max_s: Seconds
    preemptions: float | None
    make_room: Mapping[str, float | None]
    baseline_counters: Mapping[str, float | None]
    per_seed_voice_p95_s: tuple[Seconds, ...]
    nth_token_median_s: tuple[Seconds, ...]
    nth_token_p95_s: tuple[Seconds, ...]
    voice_wait_parts_mean_s: Mapping[str, Seconds] | None
    voice_wait_total_mean_s: Seconds
    voice_wait_kv_share: float | None
    agent_throughput_ratio: float | None = None
    agent_throughput_ratio_alone: float | None = None
    paired_vs_vllm_priority: PairedComparison | None = None
    # 95% intervals by field, resampling whole calls (`flatshare.colocation.summary.call_cis`)
    voice_call_ci: Mapping[str, tuple[float, float]] = dataclasses.field(default_factory=dict)
    # where the engine's time went over the run's duration, mean per run (`flatshare.sim.step_ledger`;
    # empty for real engines and for runs saved before the ledger)
    step_ledger: Mapping[str, float | None] = dataclasses.field(default_factory=dict)
    # where the engine's KV cache went over the run's duration, mean per run (`flatshare.sim.kv_ledger`;
    # empty for real engines and unless every run of the condition saved one)
    kv_ledger: Mapping[str, float | None] = dataclasses.field(default_factory=dict)

    def nth_token_median(self, n: int) -> Seconds:
        """Median time from send to the n-th output token (1-based), None past the measured range."""
        return self.nth_token_median_s[n - 1] if 1 <= n <= len(self.nth_token_median_s) else None

    def to_json(self) -> dict[str, Any]:
        """The fields as JSON; an empty `kv_ledger` is left out (summaries made before it read the same)."""
        out = dataclasses.asdict(self)
        if not out["kv_ledger"]:
            del out["kv_ledger"]
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ConditionResult:
        """The inverse of `to_json`; TypeError on a key that is not a field."""
        d = dict(data)
        paired = d.get("paired_vs_vllm_priority")
        d["paired_vs_vllm_priority"] = None if paired is None else PairedComparison(**paired)
        ci = d.get("voice_turn_p95_ci")
        d["voice_turn_p95_ci"] = None if ci is None else tuple(ci)
        for key in ("per_seed_voice_p95_s", "nth_token_median_s", "nth_token_p95_s"):
            d[key] = tuple(d.get(key, ()))
        d["voice_call_ci"] = {k: (v[0], v[1]) for k, v in d.get("voice_call_ci", {}).items()}
        return cls(**d)


@dataclass(frozen=True)
class CallerResult:
    """Every condition at one caller count, and the target its turns are held to."""

    target_s: Seconds
    conditions: Mapping[str, ConditionResult]

    def to_json(self) -> dict[str, Any]:
        return {"target_s": self.target_s, "conditions": {k: m.to_json() for k, m in self.conditions.items()}}


@dataclass(frozen=True)
class SeedComparisonRow:
    """One figure of the first seed's table beside this experiment's (`flatshare.colocation.seed_table`).

    `flatshare`, `ratio` and `hit` are None when the runs lack the condition the row needs. `ci`: the
    interval of `flatshare` resampling whole calls, for rows that read one condition's voice figure (None
    for ratios between conditions and per-token rows). `kind`: `fitted` (enters the seed fit's loss),
    `calibrated` (pinned by a choice made to match it) or `prediction` (`flatshare.colocation.seed_table.
    RowKind`). `seed_engine_s`/`engine_s`: for a voice-turn row, the seed's and flatshare's turn less the
    fixed voice pipeline (None for other rows); such a row's `hit` is judged on them, any other's on
    `flatshare` alone. `spread_low`/`spread_high`: the figure's range over the seed fit's near-optimal set
    (`flatshare.colocation.seed_table.seed_comparison`); with them, `hit` is judged on the range.
    """

    row: str
    seed: float
    flatshare: float | None
    ratio: float | None
    kind: str
    hit: bool | None
    ci: tuple[float, float] | None = None  # flatshare's 95% interval, resampling whole calls
    seed_engine_s: float | None = None
    engine_s: float | None = None
    spread_low: float | None = None  # lowest and highest over the fit's near-optimal set (None: no set run)
    spread_high: float | None = None

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class AblationRow:
    """One make-room variant at one caller count beside the variant below it
    (`flatshare.colocation.ablation`): its figures, what each changed over `below`'s (`*_delta`, this
    minus below's; None without a `below`), and its verdict on each criterion of the goal
    (`flatshare.colocation.goal`; None where these runs cannot judge it). `below`: the nearest ancestor
    present in the runs along the ablation's edges (None for the root, `vllm-priority`); `adds`: what
    this variant adds over it. `agent_rate`: agents' token rate / `vllm-priority`'s; `agent_wait`: their
    slowest first-token wait / `vllm-priority`'s."""

    callers: int
    condition: str
    below: str | None
    adds: str
    over_target: float | None
    over_target_ci: tuple[float, float] | None
    over_target_delta: float | None
    turn_p95_s: Seconds
    turn_p95_delta_s: Seconds
    agent_rate: float | None
    agent_rate_delta: float | None
    agent_wait: float | None
    meets_over_target: bool | None
    meets_p95: bool | None
    meets_agent_rate: bool | None
    meets_agent_wait: bool | None
    meets_goal: bool | None

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class ColocationSummary:
    """The whole experiment: one `CallerResult` per caller count; the first (smallest) is the headline."""

    version: int
    voice_pipeline_fixed_s: float
    callers: tuple[int, ...]
    by_callers: Mapping[int, CallerResult]
    seed_comparison: tuple[SeedComparisonRow, ...] = ()
    setup: Mapping[str, Any] | None = None
    engine: Mapping[str, Any] | None = None  # what the runs ran on (`engine.json`'s `engine`), when shared
    ablation: tuple[AblationRow, ...] = ()  # derived from by_callers (`flatshare.colocation.ablation`)

    def __post_init__(self) -> None:
        if not self.callers or set(self.callers) != set(self.by_callers):
            raise ValueError("summary: callers must name every caller count of by_callers")

    @property
    def first(self) -> CallerResult:
        return self.by_callers[self.callers[0]]

    @property
    def target_s(self) -> Seconds:
        return self.first.target_s

    @property
    def conditions(self) -> Mapping[str, ConditionResult]:
        return self.first.conditions

    def to_json(self) -> dict[str, Any]:
        """`summary.json`'s content (the schema in `flatshare.colocation.summary`)."""
        first = self.first.to_json()
        return {
            "version": self.version,
            "voice_pipeline_fixed_s": self.voice_pipeline_fixed_s,
            "target_s": first["target_s"],
            "conditions": first["conditions"],
            "callers": list(self.callers),
            "by_callers": {str(n): block.to_json() for n, block in self.by_callers.items()},
            "seed_comparison": [row.to_json() for row in self.seed_comparison],
            "ablation": [row.to_json() for row in self.ablation],
            "setup": None if self.setup is None else dict(self.setup),
        } | ({"engine": dict(self.engine)} if self.engine else {})

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ColocationSummary:
        """The measurements of a `to_json()`; `seed_comparison` and `ablation` are derived from them and left
        empty here (`flatshare.colocation.summary.load_summary` derives them again, with today's tables)."""
        by_callers = {
            int(n): CallerResult(
                block["target_s"], {k: ConditionResult.from_json(m) for k, m in block["conditions"].items()}
            )
            for n, block in data["by_callers"].items()
        }
        return cls(
            version=data["version"],
            voice_pipeline_fixed_s=data["voice_pipeline_fixed_s"],
            callers=tuple(data["callers"]),
            by_callers=by_callers,
            setup=data.get("setup"),
            engine=data.get("engine"),
        )
