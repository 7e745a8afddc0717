"""The request record format, version 2: one JSON object per request, one a line (`requests.jsonl`).

Every writer writes it: `flatshare sim`, `flatshare replay` (`--sim` and against endpoints), the
experiments. Every reader reads it through `read_records` (or `ReplayRecord.from_json`, line by line).
The fields, their meaning and the versioning rule: docs/records.md. In short: `version`, `id`,
`session_id`, `cls`, `priority`, `prompt_tokens`, `max_tokens`, `first_sentence_tokens`, `engine`,
`send_s`, `token_times_s`, `output_tokens`, `first_token_s`, `first_sentence_s`, `end_s`,
`finish_reason`, `status` (`ok`, `failed`, `refused`), `error`, and what only the simulator knows:
`first_scheduled_s`, `wait_s`, `preemptions` (null elsewhere). Times are seconds from the start of the
run. Every field is always written; the simulator-only ones are null from real endpoints.

Files of version 1 (the replay record with `version: 1`, or `flatshare sim`'s record with `arrival_s`
and `finish_s`) are refused with a one-line error naming the field and the converter, `flatshare records
upgrade IN OUT` (`flatshare.runfiles.upgrade`).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from flatshare import jsonin
from flatshare.errors import InputError
from flatshare.runfiles.files import write_atomic

RECORD_VERSION = 2
STATUSES = ("ok", "failed", "refused")
UPGRADE_HINT = "convert the file with `flatshare records upgrade IN OUT`"
MAX_TIME_S = 1e7  # seconds from the start of a run: 115 days
MAX_TOKENS = 10_000_000  # prompt, output and first-sentence tokens of one request


def first_sentence_times(
    token_times_s: Sequence[float], first_sentence_tokens: int | None
) -> Sequence[float]:
    """When each token of a reply's first sentence came: its first `first_sentence_tokens` token times (all
    of them for a reply cut shorter); empty when the request names no first sentence or produced nothing.
    The one definition of the first sentence that records, the drivers and the listening pages share."""
    if first_sentence_tokens is None:
        return ()
    return token_times_s[:first_sentence_tokens]


_TIMES = ("send_s", "end_s", "first_token_s", "first_sentence_s", "first_scheduled_s")
_COUNTS = {
    "prompt_tokens": 0,
    "max_tokens": 0,
    "output_tokens": 0,
    "first_sentence_tokens": 1,
    "preemptions": 0,
}


@dataclass
class ReplayRecord:
    """One request as written. Mutable: the drivers fill it in while the request runs."""

    id: str
    session_id: str
    cls: str
    priority: int
    prompt_tokens: int
    max_tokens: int
    engine: str
    send_s: float
    first_sentence_tokens: int | None = None
    token_times_s: list[float] = field(default_factory=list)
    end_s: float | None = None
    finish_reason: str | None = None
    status: str = "ok"
    error: str | None = None
    first_scheduled_s: float | None = None
    wait_s: dict[str, float] | None = None
    preemptions: int | None = None

    @property
    def first_token_s(self) -> float | None:
        return self.token_times_s[0] if self.token_times_s else None

    @property
    def first_sentence_s(self) -> float | None:
        sentence = first_sentence_times(self.token_times_s, self.first_sentence_tokens)
        return sentence[-1] if sentence else None

    @property
    def ttft_s(self) -> float | None:
        first = self.first_token_s
        return None if first is None else first - self.send_s

    def to_json(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data.update(
            version=RECORD_VERSION,
            first_token_s=self.first_token_s,
            first_sentence_s=self.first_sentence_s,
            output_tokens=len(self.token_times_s),
        )
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any], where: str = "record") -> ReplayRecord:
        """Validate one decoded record (InputError prefixed with `where` naming the first problem)."""
        problems = schema_problems(data)
        if problems:
            raise InputError(f"{where}: {problems[0]}")
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})


_TYPES: dict[str, tuple[type, ...]] = {
    "version": (int,),
    "id": (str,),
    "session_id": (str,),
    "cls": (str,),
    "priority": (int,),
    "prompt_tokens": (int,),
    "max_tokens": (int,),
    "engine": (str,),
    "send_s": (int, float),
    "token_times_s": (list,),
    "output_tokens": (int,),
    "status": (str,),
}
_NULLABLE: dict[str, tuple[type, ...]] = {
    "first_sentence_tokens": (int,),
    "first_token_s": (int, float),
    "first_sentence_s": (int, float),
    "end_s": (int, float),
    "finish_reason": (str,),
    "error": (str,),
    "first_scheduled_s": (int, float),
    "wait_s": (dict,),
    "preemptions": (int,),
}
FIELDS = (*_TYPES, *_NULLABLE)


def old_format(data: dict[str, Any]) -> str | None:
    """Which old record format `data` is (`sim-1`, `replay-1`), or None when it is not an old one."""
    if "version" not in data and "arrival_s" in data:
        return "sim-1"
    if data.get("version") == 1:
        return "replay-1"
    return None


def _old_format_problem(kind: str) -> str:
    if kind == "sim-1":
        what = "field 'arrival_s': an old `flatshare sim` record (version 1; now `send_s`)"
    else:
        what = f"field 'version': 1, an old record (this flatshare reads version {RECORD_VERSION})"
    return f"{what}; {UPGRADE_HINT}"


def schema_problems(data: Any) -> list[str]:
    """Everything wrong with one decoded record (empty when it is valid). An old record gives one problem
    that names the field and the converter."""
    if not isinstance(data, dict):
        return ["a record must be a JSON object"]
    kind = old_format(data)
    if kind is not None:
        return [_old_format_problem(kind)]
    problems = []
    for name, types in {**_TYPES, **_NULLABLE}.items():
        if name not in data:
            problems.append(f"field '{name}': missing")
            continue
        value = data[name]
        nullable = name in _NULLABLE
        if (value is None and nullable) or (isinstance(value, types) and not isinstance(value, bool)):
            continue
        problems.append(f"field '{name}': expected {'/'.join(t.__name__ for t in types)}, got {value!r}")
    if problems:
        return problems
    if data["version"] != RECORD_VERSION:
        problems.append(f"field 'version': {data['version']} is not {RECORD_VERSION}")
    if data["status"] not in STATUSES:
        problems.append(f"field 'status': {data['status']!r} not in {STATUSES}")
    problems += _range_problems(data)
    if problems:
        return problems
    times = data["token_times_s"]
    if any(not isinstance(t, int | float) or isinstance(t, bool) for t in times) or times != sorted(times):
        problems.append("field 'token_times_s': must be non-decreasing numbers")
    elif len(times) > MAX_TOKENS:
        problems.append(f"field 'token_times_s': more than {MAX_TOKENS:,} tokens")
    elif data["output_tokens"] != len(times):
        problems.append("field 'output_tokens': does not match token_times_s")
    elif times and not (times[0] >= 0 and times[-1] <= MAX_TIME_S):
        problems.append(f"field 'token_times_s': times must lie in [0, {MAX_TIME_S:g}] s")
    elif times and times[0] < data["send_s"]:
        problems.append("field 'token_times_s': a token before send_s")
    if data["status"] == "ok" and data["end_s"] is None:
        problems.append("field 'end_s': an ok request must have ended")
    elif data["end_s"] is not None and data["end_s"] < data["send_s"]:
        problems.append(f"field 'end_s': {data['end_s']} is before send_s {data['send_s']}")
    return problems


def _range_problems(data: dict[str, Any]) -> list[str]:
    """Numbers out of their ranges: times in [0, MAX_TIME_S] s, token counts in [0, MAX_TOKENS], a first
    sentence of at least one token, preemptions >= 0, `wait_s` a table of times."""
    problems = []
    for name in _TIMES:
        value = data[name]
        if value is not None and not 0 <= value <= MAX_TIME_S:
            problems.append(f"field '{name}': {value!r} is not a time in [0, {MAX_TIME_S:g}] s")
    for name, low in _COUNTS.items():
        value = data[name]
        if value is not None and not low <= value <= MAX_TOKENS:
            problems.append(f"field '{name}': {value!r} is not a count in [{low}, {MAX_TOKENS:,}]")
    waits = data["wait_s"] or {}
    if any(
        not isinstance(v, int | float) or isinstance(v, bool) or not 0 <= v <= MAX_TIME_S
        for v in waits.values()
    ):
        problems.append(f"field 'wait_s': values must be times in [0, {MAX_TIME_S:g}] s")
    return problems


def record_lines(records: Iterable[ReplayRecord]) -> Iterable[str]:
    """Each record as its line in a record file (keys sorted, newline-terminated)."""
    for record in records:
        yield json.dumps(record.to_json(), sort_keys=True) + "\n"


def write_records(path: Path, records: Iterable[ReplayRecord]) -> None:
    """Write a record file, atomically and safely (`flatshare.runfiles.files.write_atomic`)."""
    write_atomic(path, lambda f: f.writelines(record_lines(records)))


def decode_lines(path: Path) -> Iterable[tuple[str, Any]]:
    """(`path:line`, decoded object) for each non-empty line; InputError for a file that cannot be read
    or a line that is not JSON (UTF-8 and within `flatshare.jsonin`'s limits, sizes included)."""
    for where, line in jsonin.read_lines(path):
        yield where, jsonin.loads(line, where)


def read_records(path: Path) -> list[ReplayRecord]:
    """Read and validate a record file; errors name the file and the line."""
    return [ReplayRecord.from_json(data, where) for where, data in decode_lines(path)]
