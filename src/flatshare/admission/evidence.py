"""Which routing decisions a measured pressure event backs, and the largest events: rows for the summary.

A row per decision that moved a request away (`DecisionRecord.moved`): when, what, from where to where,
the KV use the policy saw on the engine it left, the event in progress there at that time (`live_event`)
and the events the request caused in the baseline run of the same workload and seed (`caused_by`).
"""

from __future__ import annotations

from flatshare.admission.attribution import PressureEvent, caused_by, live_event
from flatshare.admission.results import DecisionRow, EventSummary, TopEvent
from flatshare.admission.runs import SavedRun

Events = dict[str, dict[int, list[PressureEvent]]]


def decision_rows(
    workload: str, grouped: dict[str, dict[int, SavedRun]], events: Events, baseline: str
) -> list[DecisionRow]:
    """Every moved decision of the workload's runs (`grouped`: condition -> seed -> run) with its backing."""
    rows = []
    for key, runs in sorted(grouped.items()):
        for seed, run in sorted(runs.items()):
            for d in (d for d in run.decisions if d.moved):
                live = live_event(d, events[key][seed])
                counter = caused_by(d.request_id, events.get(baseline, {}).get(seed, []))
                seen = next((b for b in d.backends if b["name"] == d.preferred), {})
                rows.append(
                    DecisionRow(
                        workload=workload,
                        condition=key,
                        seed=seed,
                        t=d.t,
                        request_id=d.request_id,
                        input_tokens=d.input_tokens,
                        from_engine=d.preferred,
                        to=d.backend,
                        kv_usage_seen=seen.get("kv_usage"),
                        reason=d.reason,
                        live_event=_summary(live) if live else None,
                        baseline_events=tuple(_summary(e) for e in counter),
                    )
                )
    return rows


def _summary(event: PressureEvent) -> EventSummary:
    return EventSummary.from_json(event.to_json())


def top_events(events: dict[int, list[PressureEvent]], n: int = 10) -> tuple[TopEvent, ...]:
    """The `n` events with the most slowed shorts (then the earliest), with their seed."""
    flat = [(seed, e) for seed, es in events.items() for e in es]
    flat.sort(key=lambda x: (-len(x[1].shorts), x[1].start_s))
    return tuple(TopEvent(seed, _summary(e)) for seed, e in flat[:n])
