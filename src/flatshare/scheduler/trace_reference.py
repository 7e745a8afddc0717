"""make-room's per-step trace (`trace_path`): every field it writes, and the reference page made from them.

    python -m flatshare.scheduler.trace_reference > docs/make-room-trace.md

`FIELDS` is the contract: tests/scheduler/test_trace_reference.py reads the keys make-room writes from its
source (`trace["key"] = ...` and `trace.update(key=...)` in make_room.py, `step` in trace.py) and fails
when one is written but not described here, or described but never written; the page must be what this
module prints.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TraceField:
    """One key of a trace line: its JSON type, the event it belongs to, and what it says."""

    type: str
    event: str
    meaning: str


EVENTS = {
    "every line": "Written once per step in which make-room did anything; only the keys of what it did appear.",
    "preemption": "make-room chose victims for a waiting request (or declined to).",
    "hold": "a protected request's window kept lower-priority work out of the step.",
    "guard": "make-room stayed out, or its prediction was checked against what vLLM did.",
    "pin": "the protected prefix pin (`pin_share`) kept or gave back blocks.",
    "hint": "an arrival hint (`hint_window_s`) opened, was fulfilled or expired.",
    "tail": "a small protected CPU-tier hit was recomputed (`recompute_tail_tokens`).",
    "ride": "held prefill rode in a held step (`hold_ride_tokens`).",
    "pace": "protected replies ahead of their deadline let lower-priority work into the step (`hold_deadline_s`).",
}

FIELDS: dict[str, TraceField] = {
    "step": TraceField("int", "every line", "vLLM's step counter (`current_step`) of the step"),
    "waiting": TraceField("str", "preemption", "the waiting request make-room acted for (vLLM's request id)"),
    "needed_blocks": TraceField(
        "int", "preemption", "KV blocks the waiting request needs this step, counted as vLLM counts"
    ),
    "free_blocks": TraceField("int", "preemption", "KV blocks free for it before any preemption"),
    "seats_free": TraceField("int", "preemption", "running seats free under `max_num_seqs`"),
    "victims": TraceField(
        "list[str]",
        "preemption",
        "the running requests preempted for it, in vLLM's victim order (strictly lower priority)",
    ),
    "for_seats": TraceField(
        "bool", "preemption", "true when the victims were preempted for a seat, not for KV blocks"
    ),
    "declined": TraceField(
        "bool",
        "preemption",
        "true when `max_victims` preemptions would not get the request admitted: nothing was preempted",
    ),
    "next_step": TraceField(
        "str",
        "preemption",
        "the request the victims were preempted for will be admitted in the next step (vLLM returns "
        "their blocks after the step in flight: async scheduling with a KV connector)",
    ),
    "hold_threshold": TraceField(
        "int", "hold", "the priority of the open window: requests above it were held out of the step"
    ),
    "held_running": TraceField(
        "list[str]",
        "hold",
        "the running requests held out of the step (prefill; decode too with `hold_decode`)",
    ),
    "held_waiting": TraceField("int", "hold", "waiting requests set aside for the step by the window"),
    "hold_released": TraceField(
        "bool", "hold", "the hold ran `max_hold_steps` steps in a row: this step holds nothing"
    ),
    "stayed_out": TraceField(
        "object",
        "guard",
        "`{request id: reason}`: a rule make-room cannot predict applies to the request (encoder "
        "inputs, Mamba, ...), so vLLM decides alone",
    ),
    "promoted": TraceField(
        "str",
        "guard",
        "a request whose asynchronous KV load or grammar finished, promoted by vLLM's own code before "
        "make-room counted it",
    ),
    "async_load": TraceField(
        "str", "guard", "the request was admitted into an asynchronous KV load (it runs once the load is in)"
    ),
    "connector_deferred": TraceField(
        "str", "guard", "the KV connector deferred the request make-room acted for (asked again next step)"
    ),
    "mispredicted": TraceField(
        "str",
        "guard",
        "vLLM did not schedule the request make-room acted for: make-room stops acting for it until vLLM "
        "schedules it (counted in `mispredicted_admissions`)",
    ),
    "pinned": TraceField(
        "object", "pin", "protected request id -> [blocks it added to the pin, blocks released over the cap]"
    ),
    "pins_released_short": TraceField(
        "int", "pin", "pinned blocks given back because vLLM's allocation failed with blocks pinned"
    ),
    "pins_released_stall": TraceField(
        "int",
        "pin",
        "pinned blocks given back because the pin kept an allocation out of a step that then ran nothing",
    ),
    "hint": TraceField("list", "hint", "request ids of arrival hints that opened a window this step"),
    "hint_fulfilled": TraceField(
        "list", "hint", "protected requests that arrived while a hint's window was open"
    ),
    "hints_expired": TraceField("int", "hint", "hint windows that ended without a protected arrival"),
    "hint_open": TraceField(
        "int", "hint", "hint windows open in this step (their hold applies; those not yet due: hint_waiting)"
    ),
    "hint_waiting": TraceField(
        "int",
        "hint",
        "open hints whose turn is due after a chunk scheduled in this step would end (no hold yet)",
    ),
    "tail_recomputed": TraceField(
        "object", "tail", "protected request id -> CPU-tier tokens recomputed instead of loaded"
    ),
    "riders": TraceField(
        "object",
        "ride",
        "lower-priority request id -> prefill tokens it got in the held step (at most the ride)",
    ),
    "ahead": TraceField(
        "list",
        "pace",
        "protected requests inside their window whose step was not held: at the measured pace their first "
        "sentence is due before `hold_deadline_s` even with this step given to lower priorities",
    ),
}


def markdown() -> str:
    """The reference page (docs/make-room-trace.md)."""
    lines = [
        "# make-room's trace",
        "",
        "<!-- Generated from flatshare.scheduler.trace_reference by `python -m "
        "flatshare.scheduler.trace_reference > docs/make-room-trace.md`;",
        "do not edit by hand (tests/scheduler/test_trace_reference.py checks it and the code). -->",
        "",
        'With `trace_path` set (`--additional-config \'{"make_room": {"enabled": true, "trace_path": '
        '"make-room.jsonl"}}\'`), make-room appends one JSON object per line to the file, for each step '
        "in which it preempted, held, or stayed out. A step in which it did nothing writes no line. Keys are "
        "sorted; a key is present only when its event happened in that step. A line with `victims` is a "
        "preemption made for a higher-priority request (docs/traffic-classes.md).",
        "",
    ]
    for event, about in EVENTS.items():
        lines += [f"## {event}", "", about, "", "| key | type | meaning |", "|---|---|---|"]
        lines += [f"| `{k}` | {f.type} | {f.meaning} |" for k, f in FIELDS.items() if f.event == event]
        lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    print(markdown(), end="")
