"""The replay record format (JSONL, one request a line), shared by both drivers and read by analysis.

Version 1. Times are seconds from the start of the run (virtual seconds for the simulator, wall
seconds for a real endpoint):

| field | type | meaning |
|---|---|---|
| `version` | int | record format version (1) |
| `id`, `session_id`, `cls` | str | request, its session, its class (`voice`, `agent`, `chat`, ...) |
| `priority` | int | vLLM's meaning: lower is more important |
| `prompt_tokens`, `max_tokens` | int | sizes as sent |
| `first_sentence_tokens` | int or null | voice: tokens of the reply's first sentence |
| `engine` | str | which engine or endpoint served it (behind a flatshare gateway: its `x-flatshare-backend`) |
| `send_s` | float | when the request was sent |
| `first_token_s` | float or null | first output token |
| `first_sentence_s` | float or null | the token that ends the first sentence (voice) |
| `end_s` | float or null | last token, or when the failure was seen |
| `token_times_s` | list of float | every output token's time, non-decreasing |
| `output_tokens` | int | tokens received |
| `finish_reason` | str or null | `length`, `stop`, `abort`, ... |
| `status` | str | `ok`, `failed` (error, timeout, cut short) or `refused` (4xx/5xx before any token) |
| `error` | str or null | what went wrong |
| `first_scheduled_s` | float or null, optional | simulator only: start of the first step that gave it tokens |
| `wait_s` | object or null, optional | simulator only: the time before the first token by part (`flatshare.sim.waits`) |

Analysis counts a `failed` or `refused` voice turn as a 30 s turn; it never drops it.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from flatshare.errors import InputError

RECORD_VERSION = 1
STATUSES = ("ok", "failed", "refused")


@dataclass
class ReplayRecord:
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

    @property
    def first_token_s(self) -> float | None:
        return self.token_times_s[0] if self.token_times_s else None

    @property
    def first_sentence_s(self) -> float | None:
        n = self.first_sentence_tokens
        if n is None or not self.token_times_s:
            return None
        return self.token_times_s[min(n, len(self.token_times_s)) - 1]

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
}


def schema_problems(data: Any) -> list[str]:
    """Everything wrong with one decoded record (empty when it is valid)."""
    if not isinstance(data, dict):
        return ["a record must be a JSON object"]
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
    times = data["token_times_s"]
    if any(not isinstance(t, int | float) for t in times) or times != sorted(times):
        problems.append("field 'token_times_s': must be non-decreasing numbers")
    elif data["output_tokens"] != len(times):
        problems.append("field 'output_tokens': does not match token_times_s")
    elif times and times[0] < data["send_s"]:
        problems.append("field 'token_times_s': a token before send_s")
    if data["status"] == "ok" and data["end_s"] is None:
        problems.append("field 'end_s': an ok request must have ended")
    return problems


def write_records(path: Path, records: Iterable[ReplayRecord]) -> None:
    with path.open("w") as f:
        for record in records:
            f.write(json.dumps(record.to_json(), sort_keys=True) + "\n")


def read_records(path: Path) -> list[ReplayRecord]:
    """Read and validate a record file; errors name the file and the line."""
    out = []
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        if not line.strip():
            continue
        try:
            data = json.loads(line)
        except json.JSONDecodeError as exc:
            raise InputError(f"{path}:{number}: not valid JSON ({exc.msg})") from exc
        out.append(ReplayRecord.from_json(data, f"{path}:{number}"))
    return out
