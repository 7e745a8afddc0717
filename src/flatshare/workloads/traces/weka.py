"""Claude Code sessions in the WEKA trace format (callanjfox/agentic-coding-analysis examples, MIT).

File format: one JSON object per session: `{"id", "block_size": 64, "requests": [...]}`. Each entry of
`requests` is either a model call `{"t", "in", "out", "hash_ids", "think_time", ...}` or a sub-agent
`{"type": "subagent", "t", "agent_id", "requests": [...]}` whose own entries nest the same way. `t` is seconds
from the start of the enclosing session (for a sub-agent entry: when it started, on its parent's clock);
`think_time` is the client's pause before the call; `hash_ids` name the input's 64-token blocks (full blocks
only; chained, so equal leading ids are a cacheable prefix; global across the file's sub-agents).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from flatshare.errors import InputError
from flatshare.workloads.model import Session, Workload, WorkloadRequest
from flatshare.workloads.tokens import hash_block_spans
from flatshare.workloads.traces.options import (
    TraceOptions,
    bad,
    check_path,
    hash_ids_field,
    int_field,
    make_request,
    seconds_field,
)


@dataclass(frozen=True)
class TraceCall:
    """One model call as recorded: `t` on its session's clock, `think_s` the pause before it."""

    t: float
    n_in: int
    n_out: int
    hash_ids: tuple[int, ...]
    think_s: float


@dataclass(frozen=True)
class TraceSession:
    """A top-level session or a sub-agent: `start_s` on the top-level session's clock."""

    id: str
    start_s: float
    calls: tuple[TraceCall, ...]


def read_sessions(path: Path | str) -> tuple[int, list[TraceSession]]:
    """`(block_size, sessions)` of a WEKA file, the top-level session first, then sub-agents in file order."""
    p = check_path(path)
    try:
        top = json.loads(p.read_text())
    except json.JSONDecodeError as e:
        raise bad(p, f"line {e.lineno}", "(file)", f"not valid JSON: {e.msg}") from None
    if not isinstance(top, dict):
        raise bad(p, "top level", "(file)", "expected a JSON object with 'requests'")
    block = int_field(p, "top level", top, "block_size", 1) if "block_size" in top else 64
    sessions: list[TraceSession] = []
    _walk(p, block, top, "top level", str(top.get("id") or p.stem), 0.0, sessions)
    sessions.sort(key=lambda s: s.start_s)
    return block, sessions


def _walk(
    path: Path,
    block: int,
    node: dict[str, object],
    where: str,
    sid: str,
    start: float,
    out: list[TraceSession],
) -> None:
    entries = node.get("requests")
    if not isinstance(entries, list):
        raise bad(path, where, "requests", "expected a list")
    calls: list[TraceCall] = []
    for j, entry in enumerate(entries):
        here = f"requests[{j}]" if where == "top level" else f"{where}.requests[{j}]"
        if not isinstance(entry, dict):
            raise bad(path, here, "(record)", "expected a JSON object")
        if entry.get("type") == "subagent":
            sub_t = seconds_field(path, here, entry, "t")
            _walk(path, block, entry, here, str(entry.get("agent_id") or f"{sid}.{j}"), start + sub_t, out)
            continue
        call = _call(path, here, entry, block)
        if calls and call.t < calls[-1].t:
            raise bad(path, here, "t", f"{call.t} is before the previous call's {calls[-1].t}")
        calls.append(call)
    if calls:
        out.append(TraceSession(sid, start + calls[0].t, tuple(calls)))


def _call(path: Path, where: str, entry: dict[str, object], block: int) -> TraceCall:
    n_in = int_field(path, where, entry, "in", 1)
    return TraceCall(
        t=seconds_field(path, where, entry, "t"),
        n_in=n_in,
        n_out=int_field(path, where, entry, "out", 0),
        hash_ids=tuple(hash_ids_field(path, where, entry, block, n_in)),
        think_s=seconds_field(path, where, entry, "think_time"),
    )


def load_weka(
    path: Path | str,
    options: TraceOptions | None = None,
    *,
    copies: int = 1,
    stagger_s: float = 0.0,
    cls: str = "agent",
) -> Workload:
    """Replay the sessions of a WEKA file, each sub-agent as its own session, `copies` times.

    A session starts when it started in the trace (sub-agents on their parent's clock); call k > 0 waits for
    call k-1's reply plus its recorded `think_time`. Copy c starts `c * stagger_s` later and has its own
    token ids (no prefix is shared between copies). `options` windows session starts, scales time and clips
    to `max_model_len` by keeping the first prompt tokens (calls past the limit then resend the same prefix).
    """
    if copies < 1 or stagger_s < 0:
        raise InputError(f"weka: copies must be >= 1 and stagger_s >= 0, got {copies} and {stagger_s}")
    p = check_path(path)
    opts = options or TraceOptions()
    block, raw = read_sessions(p)
    sessions: list[Session] = []
    for c in range(copies):
        tag = f"{p.stem}/c{c}" if copies > 1 else p.stem
        for s in raw:
            start = c * stagger_s + s.start_s
            if opts.in_window(start):
                sessions.append(_session(s, f"{tag}/{s.id}", start, block, tag, cls, opts))
    if not sessions:
        raise InputError(f"{p}: no sessions start in the chosen window")
    return Workload(f"weka-{p.stem}", tuple(sessions))


weka_sessions = load_weka


def _session(
    s: TraceSession, sid: str, start: float, block: int, tag: str, cls: str, opts: TraceOptions
) -> Session:
    requests: list[WorkloadRequest] = []
    for k, call in enumerate(s.calls):
        rid = f"{sid}/{k}"
        arrival = opts.scaled(start + call.t - s.calls[0].t)
        prompt = hash_block_spans(call.hash_ids, block, call.n_in, f"weka/{tag}", tail_key=f"weka-tail/{rid}")
        requests.append(
            make_request(
                id=rid,
                session_id=sid,
                cls=cls,
                options=opts,
                prompt=prompt,
                max_tokens=max(1, call.n_out),
                pause_before_s=opts.scaled(start) if k == 0 else call.think_s / opts.rate,
                arrival_s=arrival,
            )
        )
    return Session(sid, cls, opts.scaled(start), tuple(requests))
