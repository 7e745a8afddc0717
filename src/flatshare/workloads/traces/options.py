"""Options shared by the trace loaders, and the helpers that apply them the same way everywhere."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from flatshare.errors import InputError
from flatshare.policy.classes import DEFAULT_PRIORITY, INTERACTIVE_PRIORITY
from flatshare.workloads.model import Session, Workload, WorkloadRequest, clip_to_model_len
from flatshare.workloads.tokens import DEFAULT_VOCAB, PromptSpan, check_vocab, head_spans, prompt_length


@dataclass(frozen=True)
class TraceOptions:
    """How to cut and scale a trace.

    Time window: keep records whose time since the trace's first record `t` satisfies
    `start_s <= t < start_s + duration_s` (`duration_s=None`: to the end); for session traces the window
    applies to session starts. The window is then shifted to start at 0 and divided by `rate` (`rate=2`
    replays twice as fast: arrivals and pauses shrink by 2). `max_model_len`: clip each request with
    `clip_to_model_len` (keep the first prompt tokens). `priority`: override the class's default priority.
    `limit`: keep at most this many records (after the window), in trace order.
    """

    start_s: float = 0.0
    duration_s: float | None = None
    rate: float = 1.0
    max_model_len: int | None = None
    vocab_size: int = DEFAULT_VOCAB
    priority: int | None = None
    limit: int | None = None

    def __post_init__(self) -> None:
        if not (math.isfinite(self.start_s) and self.start_s >= 0):
            raise InputError(f"trace option start_s must be >= 0, got {self.start_s}")
        if self.duration_s is not None and not (math.isfinite(self.duration_s) and self.duration_s > 0):
            raise InputError(f"trace option duration_s must be > 0, got {self.duration_s}")
        if not (math.isfinite(self.rate) and self.rate > 0):
            raise InputError(f"trace option rate must be > 0, got {self.rate}")
        if self.max_model_len is not None and self.max_model_len < 2:
            raise InputError(f"trace option max_model_len must be >= 2, got {self.max_model_len}")
        if self.limit is not None and self.limit < 1:
            raise InputError(f"trace option limit must be >= 1, got {self.limit}")
        try:
            check_vocab(self.vocab_size)
        except ValueError as e:
            raise InputError(f"trace option vocab_size: {e}") from None

    def in_window(self, t: float) -> bool:
        """Whether a record `t` seconds after the trace's first record falls in the window."""
        end = math.inf if self.duration_s is None else self.start_s + self.duration_s
        return self.start_s <= t < end

    def scaled(self, t: float) -> float:
        """Replay time of trace time `t` (seconds since the first record): shifted and divided by rate."""
        return (t - self.start_s) / self.rate

    def priority_for(self, cls: str) -> int:
        if self.priority is not None:
            return self.priority
        return DEFAULT_PRIORITY.get(cls, INTERACTIVE_PRIORITY)


def bad(path: Path | str, where: str, field: str, problem: str) -> InputError:
    """The loaders' error: names the file, the record and the field."""
    return InputError(f"{path}: {where}: field {field!r}: {problem}")


def int_field(path: Path, where: str, record: dict[str, object], field: str, low: int) -> int:
    """`record[field]` as an int >= `low` (ints written as floats, like 12.0, are accepted)."""
    if field not in record:
        raise bad(path, where, field, "missing")
    value = record[field]
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise bad(path, where, field, f"expected an integer >= {low}, got {value!r}")
    return value


def seconds_field(path: Path, where: str, record: dict[str, object], field: str) -> float:
    """`record[field]` as a finite number >= 0."""
    if field not in record:
        raise bad(path, where, field, "missing")
    value = record[field]
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        raise bad(path, where, field, f"expected a finite number >= 0, got {value!r}")
    return float(value)


def hash_ids_field(
    path: Path, where: str, record: dict[str, object], block: int, total: int, field: str = "hash_ids"
) -> list[int]:
    """`record[field]`: non-negative ints, one per `block` tokens of `total` (full blocks or all blocks)."""
    if field not in record:
        raise bad(path, where, field, "missing")
    ids = record[field]
    if not isinstance(ids, list) or not all(type(h) is int and h >= 0 for h in ids):
        raise bad(path, where, field, "expected a list of non-negative integers")
    low, high = total // block, -(-total // block)
    if not low <= len(ids) <= high:
        raise bad(path, where, field, f"{len(ids)} blocks of {block} tokens cannot describe {total} tokens")
    return ids


def check_path(path: Path | str) -> Path:
    """`path` as a Path to an existing file, else InputError."""
    p = Path(path)
    if not p.is_file():
        raise InputError(f"{p}: no such file")
    return p


def make_request(
    *,
    id: str,
    cls: str,
    options: TraceOptions,
    prompt: Sequence[PromptSpan],
    max_tokens: int,
    session_id: str | None = None,
    pause_before_s: float = 0.0,
    arrival_s: float | None = None,
    text: str | None = None,
) -> WorkloadRequest:
    """A request with the options' priority, vocabulary and model-length clipping applied."""
    n_prompt, max_tokens = clip_to_model_len(prompt_length(prompt), max_tokens, options.max_model_len)
    return WorkloadRequest(
        id=id,
        session_id=session_id or id,
        cls=cls,
        priority=options.priority_for(cls),
        prompt=head_spans(prompt, n_prompt),
        max_tokens=max_tokens,
        pause_before_s=pause_before_s,
        arrival_s=arrival_s,
        text=text,
        vocab_size=options.vocab_size,
    )


def open_loop(name: str, requests: list[WorkloadRequest], path: Path) -> Workload:
    """A workload of one-request sessions issued at each request's `arrival_s`; InputError if empty."""
    if not requests:
        raise InputError(f"{path}: no records in the chosen window")
    sessions = []
    for r in sorted(requests, key=lambda r: r.arrival_s or 0.0):
        start = r.arrival_s if r.arrival_s is not None else 0.0
        sessions.append(Session(r.id, r.cls, start, (replace(r, pause_before_s=start),)))
    return Workload(name, tuple(sessions))
