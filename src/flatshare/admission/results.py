"""The admission experiment's results as typed, frozen objects; `summary.json` is their `to_json()`.

`flatshare.admission.summary` builds them from saved runs; the report, the figures and the CLI read them
by attribute. `summary.json`'s schema is docs/admission.md ("summary.json (version 1)"); a field's JSON key
is its name, except where a class says otherwise: a condition's comparison with its baseline is written
flat into the condition (`p_value`, `p_value_method`, `mean_difference_s`, `t`, `n_pairs`), `vs_round_robin`
is written as `vs_round-robin` (only when present), `DecisionRow.from_engine` as `from`, and seeds, which
are ints here, are JSON object keys as strings. `None` means "not measured in these runs".
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from flatshare.admission.attribution import AttributionConfig

Seconds = float | None
Interval = tuple[Seconds, Seconds]


@dataclass(frozen=True)
class BaselineTest:
    """A condition against its workload's baseline (all None, `n_pairs` 0, for the baseline and `alone`)."""

    p_value: float | None = None
    p_value_method: str | None = None
    mean_difference_s: Seconds = None
    t: float | None = None
    n_pairs: int = 0

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class PreferenceTest:
    """`on` against the routing it overrides (`round-robin`): the rule's own effect."""

    p_value: float | None
    method: str
    mean_difference_s: Seconds

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class Slowdown:
    """Each short's TTFT over its TTFT alone (same seed, same request): median and max."""

    median: float
    max: float

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class AttributionCounts:
    """Slowed shorts and pressure events of a condition, and its moved decisions with what backs them."""

    flagged_shorts: int
    events: int
    moved: int
    moved_backed_live: int
    moved_backed_baseline: int

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class ConditionResult:
    """One condition of one workload, over its seeds (field meanings: docs/admission.md)."""

    n_runs: int
    n_short: int
    short_ttft_p95_s: Seconds
    short_ttft_p95_ci: Interval | None
    ci_method: str
    per_seed_short_ttft_p95_s: tuple[Seconds, ...]
    short_ttft_p50_s: Seconds
    short_input_ttft_p95_s: Seconds
    short_ttft_max_s: Seconds
    long_requests: int
    long_ttft_s: Seconds
    long_ttft_p95_s: Seconds
    tokens_per_s: float | None
    routed_away_n: int | None
    routed_away_frac: float | None
    kv_usage_p50: float | None
    kv_usage_p95: float | None
    kv_usage_max: float | None
    waiting_p95: float | None
    preemptions: float | None
    failed: int
    make_room: Mapping[str, float | None]
    attribution: AttributionCounts
    vs_baseline: BaselineTest
    vs_round_robin: PreferenceTest | None
    slowdown_vs_alone: Slowdown | None
    mean_ttlt_s: Seconds = None
    mean_ttlt_ci: Interval | None = None
    ttlt_vs_baseline: BaselineTest = dataclasses.field(default_factory=BaselineTest)

    def to_json(self) -> dict[str, Any]:
        nested = ("attribution", "vs_baseline", "vs_round_robin", "slowdown_vs_alone", "ttlt_vs_baseline")
        out: dict[str, Any] = {
            f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name not in nested
        }
        out["mean_ttlt_ci"] = None if self.mean_ttlt_ci is None else list(self.mean_ttlt_ci)
        out["ttlt_vs_baseline"] = self.ttlt_vs_baseline.to_json()
        out["short_ttft_p95_ci"] = None if self.short_ttft_p95_ci is None else list(self.short_ttft_p95_ci)
        out["per_seed_short_ttft_p95_s"] = list(self.per_seed_short_ttft_p95_s)
        out["make_room"] = dict(self.make_room)
        out["attribution"] = self.attribution.to_json()
        out.update(self.vs_baseline.to_json())
        if self.vs_round_robin is not None:
            out["vs_round-robin"] = self.vs_round_robin.to_json()
        out["slowdown_vs_alone"] = (
            None if self.slowdown_vs_alone is None else self.slowdown_vs_alone.to_json()
        )
        return out


@dataclass(frozen=True)
class Responsible:
    """A request held responsible for a pressure event, with its time-averaged share of the engine's KV."""

    request_id: str
    kv_share: float


@dataclass(frozen=True)
class EventSummary:
    """A pressure event as the summary shows it (times and shares rounded as `PressureEvent.to_json`)."""

    engine: str
    start_s: float
    end_s: float
    shorts: tuple[str, ...]
    worst_slowdown: float
    responsible: tuple[Responsible, ...]
    kv_usage_mean: float

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> EventSummary:
        """From `PressureEvent.to_json()`'s dict (the one place the rounding lives)."""
        return cls(
            engine=data["engine"],
            start_s=data["start_s"],
            end_s=data["end_s"],
            shorts=tuple(data["shorts"]),
            worst_slowdown=data["worst_slowdown"],
            responsible=tuple(Responsible(r["request_id"], r["kv_share"]) for r in data["responsible"]),
            kv_usage_mean=data["kv_usage_mean"],
        )

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self) | {
            "shorts": list(self.shorts),
            "responsible": [dataclasses.asdict(r) for r in self.responsible],
        }


@dataclass(frozen=True)
class TopEvent:
    """One of a baseline's largest pressure events, with the seed (window) it happened in."""

    seed: int
    event: EventSummary

    @property
    def n_shorts(self) -> int:
        return len(self.event.shorts)

    def to_json(self) -> dict[str, Any]:
        return {"seed": self.seed, **self.event.to_json(), "n_shorts": self.n_shorts}


@dataclass(frozen=True)
class DecisionRow:
    """A routing decision that moved a request away, with the pressure events that back it."""

    workload: str
    condition: str
    seed: int
    t: float
    request_id: str
    input_tokens: int
    from_engine: str
    to: str
    kv_usage_seen: float | None
    reason: str
    live_event: EventSummary | None
    baseline_events: tuple[EventSummary, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "workload": self.workload,
            "condition": self.condition,
            "seed": self.seed,
            "t": self.t,
            "request_id": self.request_id,
            "input_tokens": self.input_tokens,
            "from": self.from_engine,
            "to": self.to,
            "kv_usage_seen": self.kv_usage_seen,
            "reason": self.reason,
            "live_event": None if self.live_event is None else self.live_event.to_json(),
            "baseline_events": [e.to_json() for e in self.baseline_events],
        }


@dataclass(frozen=True)
class WorkloadResult:
    """One workload (`synthetic`, `synthetic-long-first`, `<trace>-e<engines>`): what ran, every condition."""

    part: str
    engines: int
    trace: str | None
    rate: float | None
    replay_s: float | None
    baseline: str
    replicates: int
    long_input_tokens: Mapping[int, int | None]
    thresholds: Mapping[int, Any]
    thresholds_source: str
    conditions: Mapping[str, ConditionResult]
    top_events: tuple[TopEvent, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "part": self.part,
            "engines": self.engines,
            "trace": self.trace,
            "rate": self.rate,
            "replay_s": self.replay_s,
            "baseline": self.baseline,
            "replicates": self.replicates,
            "long_input_tokens": {str(s): v for s, v in self.long_input_tokens.items()},
            "thresholds": {str(s): v for s, v in self.thresholds.items()},
            "thresholds_source": self.thresholds_source,
            "conditions": {k: m.to_json() for k, m in self.conditions.items()},
            "top_events": [e.to_json() for e in self.top_events],
        }


@dataclass(frozen=True)
class LeverCell:
    """One cell of the routing x make-room 2x2: its condition's result and the cut against cell A."""

    condition: str
    short_ttft_p95_s: Seconds
    short_ttft_p95_ci: Interval | None
    reduction_s: Seconds
    long_ttft_s: Seconds
    tokens_per_s: float | None
    p_value: float | None

    def to_json(self) -> dict[str, Any]:
        ci = None if self.short_ttft_p95_ci is None else list(self.short_ttft_p95_ci)
        return dataclasses.asdict(self) | {"short_ttft_p95_ci": ci}


@dataclass(frozen=True)
class SkippedCondition:
    key: str
    why: str


@dataclass(frozen=True)
class Skipped:
    """Endpoint mode: the conditions not run and why, and why the traces were not run (None: they were)."""

    conditions: tuple[SkippedCondition, ...]
    traces: str | None

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Skipped:
        """From `experiment.json`'s `plan.skipped`."""
        items = data.get("conditions") or []
        return cls(tuple(SkippedCondition(c["key"], c["why"]) for c in items), data.get("traces"))

    def to_json(self) -> dict[str, Any]:
        return {"conditions": [dataclasses.asdict(c) for c in self.conditions], "traces": self.traces}


@dataclass(frozen=True)
class AdmissionSummary:
    """The whole experiment: settings, one `WorkloadResult` per workload, the 2x2 and the moved decisions.

    `skipped` is written to JSON only in endpoint mode (there, null when the plan does not say).
    """

    version: int
    mode: str
    endpoint: str | None
    backends: tuple[str, ...] | None
    model: str | None
    attribution_note: str | None
    profile: str
    short_max_tokens: int
    failed_ttft_s: float
    attribution_config: AttributionConfig
    workloads: Mapping[str, WorkloadResult]
    levers: Mapping[str, Mapping[str, LeverCell]]
    decisions: tuple[DecisionRow, ...]
    decisions_total: int
    skipped: Skipped | None = None

    def __post_init__(self) -> None:
        if not self.workloads:
            raise ValueError("summary: no workloads")
        if self.mode not in ("simulated", "endpoint"):
            raise ValueError(f"summary: mode must be simulated or endpoint, got {self.mode!r}")

    def to_json(self) -> dict[str, Any]:
        """`summary.json`'s content (schema: docs/admission.md)."""
        out = {
            "version": self.version,
            "mode": self.mode,
            "endpoint": self.endpoint,
            "backends": None if self.backends is None else list(self.backends),
            "model": self.model,
            "attribution_note": self.attribution_note,
            "profile": self.profile,
            "short_max_tokens": self.short_max_tokens,
            "failed_ttft_s": self.failed_ttft_s,
            "attribution_config": dataclasses.asdict(self.attribution_config),
            "workloads": {name: w.to_json() for name, w in self.workloads.items()},
            "levers": {
                name: {cell: m.to_json() for cell, m in cells.items()} for name, cells in self.levers.items()
            },
            "decisions": [r.to_json() for r in self.decisions],
            "decisions_total": self.decisions_total,
        }
        if self.mode == "endpoint":
            out["skipped"] = None if self.skipped is None else self.skipped.to_json()
        return out
