"""Interference attribution: which short requests were slowed, by whom, and which routing decisions a
measured pressure event backed. Reads saved runs only.

Definitions (`AttributionConfig`):
- Expected TTFT alone of a prompt of p tokens: its prefill on an idle engine, priced by the step-time
  profile: chunks of `max_num_batched_tokens`, each one step (`expected_ttft_s`).
- A short request (at most 256 output tokens) is *slowed* when its TTFT exceeds `slowdown` x expected
  + `margin_s`. It is *overdue* from `send + slowdown x expected + margin` until its first token: during
  that interval a gateway could already see it was late. A request that never got a token is slowed
  until its end.
- A *pressure event* is a maximal set of slowed shorts on one engine whose overdue intervals overlap;
  its interval is their union. Over the event's *window* (first send to last first token of its
  shorts), every other request on the engine gets a KV-pressure score: its time-averaged share of the
  engine's KV tokens (`held tokens / kv_tokens`, from `occupancy.jsonl`). The *responsible* requests are
  the top scorers: at most `max_responsible`, each scoring at least `responsible_share` of the top.
- A routing decision that moved a request away (reason `kv_pressure`) is *backed live* when an event on
  its preferred engine was in progress at the decision time; *backed counterfactually* when, in the
  baseline run of the same workload and seed, the moved request was responsible for an event.

A run without occupancy data or a step-time profile (a run against a real gateway) has no events:
`has_occupancy` says whether a run can be attributed at all.
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from flatshare.admission.cluster import DecisionRecord
from flatshare.admission.plan import SHORT_MAX_TOKENS
from flatshare.admission.runs import SavedRun
from flatshare.runfiles.records import ReplayRecord
from flatshare.sim.profile import ScheduledWork, StepTimeProfile, load_profile


@dataclass(frozen=True)
class AttributionConfig:
    slowdown: float = 3.0
    margin_s: float = 0.1
    responsible_share: float = 0.5
    max_responsible: int = 3
    short_max_tokens: int = SHORT_MAX_TOKENS

    def __post_init__(self) -> None:
        if self.slowdown < 1 or self.margin_s < 0 or not 0 < self.responsible_share <= 1:
            raise ValueError("attribution: slowdown >= 1, margin >= 0, responsible_share in (0, 1]")
        if self.max_responsible < 1:
            raise ValueError("attribution: max_responsible >= 1")


@dataclass(frozen=True)
class Slowed:
    request_id: str
    engine: str
    send_s: float
    first_token_s: float
    expected_s: float
    overdue_from_s: float

    @property
    def ttft_s(self) -> float:
        return self.first_token_s - self.send_s


@dataclass(frozen=True)
class PressureEvent:
    """Slowed shorts on one engine, when they were overdue, and the requests holding the KV meanwhile."""

    engine: str
    start_s: float
    end_s: float
    shorts: tuple[Slowed, ...]
    responsible: tuple[tuple[str, float], ...]
    kv_usage_mean: float

    def to_json(self) -> dict[str, Any]:
        return {
            "engine": self.engine,
            "start_s": round(self.start_s, 4),
            "end_s": round(self.end_s, 4),
            "shorts": [s.request_id for s in self.shorts],
            "worst_slowdown": round(max(s.ttft_s / s.expected_s for s in self.shorts), 2),
            "responsible": [{"request_id": r, "kv_share": round(x, 4)} for r, x in self.responsible],
            "kv_usage_mean": round(self.kv_usage_mean, 4),
        }


def expected_ttft_s(prompt_tokens: int, profile: StepTimeProfile, budget: int) -> float:
    """The prompt's prefill alone on an idle engine, chunk by chunk (the module docstring)."""
    total, done = 0.0, 0
    while done < prompt_tokens:
        n = min(budget, prompt_tokens - done)
        total += profile.step_time([ScheduledWork(n, done, False)])
        done += n
    return total


def slowed_shorts(
    records: Iterable[ReplayRecord], profile: StepTimeProfile, budget: int, config: AttributionConfig
) -> list[Slowed]:
    out = []
    for r in records:
        if r.max_tokens > config.short_max_tokens or r.cls == "long":
            continue
        expected = expected_ttft_s(r.prompt_tokens, profile, budget)
        first = r.first_token_s if r.first_token_s is not None else (r.end_s or r.send_s)
        limit = config.slowdown * expected + config.margin_s
        if first - r.send_s > limit or r.first_token_s is None:
            out.append(Slowed(r.id, r.engine, r.send_s, first, expected, r.send_s + limit))
    return out


class Occupancy:
    """One run's occupancy rows by engine, for integrals over time windows."""

    def __init__(self, rows: Iterable[dict[str, Any]]) -> None:
        by_engine: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for row in rows:
            by_engine[row["engine"]].append(row)
        self.rows = {e: sorted(rs, key=lambda r: r["t"]) for e, rs in by_engine.items()}
        self.times = {e: [r["t"] for r in rs] for e, rs in self.rows.items()}

    def spans(self, engine: str, start: float, end: float) -> list[tuple[float, dict[str, Any]]]:
        """(seconds, row) for each row in effect during [start, end]."""
        rows, times = self.rows.get(engine, []), self.times.get(engine, [])
        i = max(0, bisect.bisect_right(times, start) - 1)
        out = []
        while i < len(rows) and rows[i]["t"] <= end:
            lo = max(start, rows[i]["t"])
            hi = min(end, rows[i + 1]["t"]) if i + 1 < len(rows) else end
            if hi > lo:
                out.append((hi - lo, rows[i]))
            i += 1
        return out

    def shares(self, engine: str, start: float, end: float, kv_tokens: int) -> tuple[dict[str, float], float]:
        """Each request's time-averaged share of the engine's KV over [start, end], and mean KV use."""
        spans = self.spans(engine, start, max(end, start + 1e-6))
        total = sum(d for d, _ in spans) or 1.0
        held: dict[str, float] = defaultdict(float)
        usage = 0.0
        for d, row in spans:
            usage += d * row["kv_usage"]
            for rid, tokens in row["held"].items():
                held[rid] += d * tokens
        return {rid: x / total / kv_tokens for rid, x in held.items()}, usage / total


def _merge(slowed: list[Slowed]) -> list[list[Slowed]]:
    """Group slowed shorts whose overdue intervals overlap (one engine's)."""
    groups: list[list[Slowed]] = []
    end = float("-inf")
    for s in sorted(slowed, key=lambda s: s.overdue_from_s):
        if groups and s.overdue_from_s <= end:
            groups[-1].append(s)
            end = max(end, s.first_token_s)
        else:
            groups.append([s])
            end = s.first_token_s
    return groups


def has_occupancy(run: SavedRun) -> bool:
    """Whether the run recorded per-request KV holdings and was priced by a profile (simulated runs)."""
    return bool(run.occupancy) and run.facts.get("profile") is not None


def pressure_events(run: SavedRun, config: AttributionConfig | None = None) -> list[PressureEvent]:
    """Every pressure event of a saved run (module docstring), in time order per engine; none for a run
    without occupancy data (`has_occupancy`)."""
    config = config or AttributionConfig()
    if not has_occupancy(run):
        return []
    engine = run.facts["engine_config"]
    profile = load_profile(run.facts["profile"])
    slowed = slowed_shorts(run.records, profile, int(engine["max_num_batched_tokens"]), config)
    occupancy = Occupancy(run.occupancy)
    by_engine: dict[str, list[Slowed]] = defaultdict(list)
    for s in slowed:
        by_engine[s.engine].append(s)
    events = []
    for name, items in sorted(by_engine.items()):
        for group in _merge(items):
            start = min(s.send_s for s in group)
            end = max(s.first_token_s for s in group)
            shares, usage = occupancy.shares(name, start, end, int(engine["kv_tokens"]))
            own = {s.request_id for s in group}
            events.append(
                PressureEvent(
                    name,
                    min(s.overdue_from_s for s in group),
                    end,
                    tuple(group),
                    _responsible({k: v for k, v in shares.items() if k not in own}, config),
                    usage,
                )
            )
    return sorted(events, key=lambda e: (e.start_s, e.engine))


def _responsible(shares: dict[str, float], config: AttributionConfig) -> tuple[tuple[str, float], ...]:
    ranked = sorted(((v, k) for k, v in shares.items() if v > 0), reverse=True)
    if not ranked:
        return ()
    top = ranked[0][0]
    chosen = [(k, v) for v, k in ranked if v >= config.responsible_share * top]
    return tuple(chosen[: config.max_responsible])


def live_event(decision: DecisionRecord, events: Sequence[PressureEvent]) -> PressureEvent | None:
    """The event on the decision's preferred engine in progress at the decision time, if any."""
    for event in events:
        if event.engine == decision.preferred and event.start_s <= decision.t <= event.end_s:
            return event
    return None


def caused_by(request_id: str, events: Sequence[PressureEvent]) -> list[PressureEvent]:
    """The events in which `request_id` is among the responsible requests."""
    return [e for e in events if any(r == request_id for r, _ in e.responsible)]
