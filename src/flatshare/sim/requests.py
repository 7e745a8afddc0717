"""The simulator's request file: JSONL, one request a line.

Fields: `id` (string, unique), `arrival_s` (>= 0), `prompt_tokens` (> 0) or `prompt_token_ids`
(a non-empty list of ints), `max_tokens` (> 0), `priority` (int, vLLM's meaning: lower is more
important), and optional `prefix_group` (requests of one group share their first tokens, see
`flatshare.sim.tokens`) and `cls` (a class label such as `voice` or `agent`, carried to the records).
Unknown fields are rejected. Any error names the file, the line and the field, and nothing is used.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flatshare import jsonin
from flatshare.errors import InputError
from flatshare.sim.tokens import TokenStreams

_REQUIRED = ("id", "arrival_s", "max_tokens", "priority")
# Arrivals past this many seconds (about 116 days) are refused: a week-long trace fits, and a float clock
# that far out still resolves a step of a few microseconds (at 1e300 s a step would not move it at all).
MAX_ARRIVAL_S = 1e7
_OPTIONAL = ("prompt_tokens", "prompt_token_ids", "prefix_group", "cls")


@dataclass(frozen=True)
class SimRequest:
    """One request for the simulated engine, with its prompt already as token ids."""

    id: str
    arrival_s: float
    prompt_token_ids: tuple[int, ...]
    max_tokens: int
    priority: int = 0
    cls: str = ""
    lora_id: int = 0
    """The LoRA adapter it asks for (vLLM's `lora_int_id`; 0: the base model)."""
    extra_args: Mapping[str, Any] | None = None
    """vLLM's `SamplingParams.extra_args` (what the OpenAI server takes as `vllm_xargs`)."""
    first_sentence_tokens: int | None = None
    """A voice reply's first sentence: the simulated model samples `engine.SENTENCE_END_TOKEN` as its
    last token (None: never)."""

    @property
    def prompt_tokens(self) -> int:
        return len(self.prompt_token_ids)


def _field_error(where: str, name: str, message: str) -> InputError:
    return InputError(f"{where}: field {name!r}: {message}")  # repr: a name from the file stays one line


def _int_field(data: Mapping[str, Any], name: str, where: str, minimum: int | None) -> int:
    value = data[name]
    if not isinstance(value, int) or isinstance(value, bool):
        raise _field_error(where, name, f"must be an integer, got {value!r}")
    if minimum is not None and value < minimum:
        raise _field_error(where, name, f"must be >= {minimum}, got {value}")
    return value


def parse_request(
    data: Mapping[str, Any], where: str, streams: TokenStreams, max_model_len: int
) -> SimRequest:
    """Validate one decoded record; `where` (e.g. `file.jsonl:3`) prefixes every error."""
    if not isinstance(data, Mapping):
        raise InputError(f"{where}: a request must be a JSON object")
    unknown = sorted(set(data) - set(_REQUIRED) - set(_OPTIONAL))
    if unknown:
        raise _field_error(where, unknown[0], f"unknown field; valid: {sorted(_REQUIRED + _OPTIONAL)}")
    for name in _REQUIRED:
        if name not in data:
            raise _field_error(where, name, "missing")
    rid = data["id"]
    if not isinstance(rid, str) or not rid:
        raise _field_error(where, "id", "must be a non-empty string")
    arrival = data["arrival_s"]
    if not isinstance(arrival, int | float) or isinstance(arrival, bool) or not 0 <= arrival <= MAX_ARRIVAL_S:
        raise _field_error(
            where, "arrival_s", f"must be a number of seconds in [0, {MAX_ARRIVAL_S:g}], got {arrival!r}"
        )
    max_tokens = _int_field(data, "max_tokens", where, 1)
    priority = _int_field(data, "priority", where, None)
    ids = _prompt_ids(data, where, streams, max_model_len - max_tokens)
    cls = data.get("cls", "")
    if not isinstance(cls, str):
        raise _field_error(where, "cls", "must be a string")
    return SimRequest(rid, float(arrival), tuple(ids), max_tokens, priority, cls)


def _too_long(where: str, name: str, prompt: int, room: int) -> InputError:
    return _field_error(
        where,
        name,
        f"prompt ({prompt}) + max_tokens exceeds max_model_len (room for {max(room, 0)} prompt tokens)",
    )


def _prompt_ids(data: Mapping[str, Any], where: str, streams: TokenStreams, room: int) -> list[int]:
    """The prompt's token ids, its length checked against `room` before any id is made."""
    if ("prompt_tokens" in data) == ("prompt_token_ids" in data):
        raise _field_error(where, "prompt_tokens", "give exactly one of prompt_tokens or prompt_token_ids")
    if "prompt_token_ids" in data:
        ids = data["prompt_token_ids"]
        ok = isinstance(ids, list) and ids and all(isinstance(x, int) and x >= 0 for x in ids)
        if not ok:
            raise _field_error(where, "prompt_token_ids", "must be a non-empty list of non-negative integers")
        if len(ids) > room:
            raise _too_long(where, "prompt_token_ids", len(ids), room)
        return list(ids)
    n = _int_field(data, "prompt_tokens", where, 1)
    if n > room:
        raise _too_long(where, "prompt_tokens", n, room)
    group = data.get("prefix_group")
    if group is not None and not isinstance(group, str):
        raise _field_error(where, "prefix_group", "must be a string")
    key = f"group:{group}" if group is not None else f"request:{data['id']}"
    return streams.take(key, n)


def parse_requests(
    records: Iterable[tuple[str, Mapping[str, Any]]], max_model_len: int, seed: int = 0
) -> list[SimRequest]:
    """Validate (where, record) pairs; ids must be unique. Returns requests sorted by arrival."""
    streams = TokenStreams(seed)
    seen: set[str] = set()
    out: list[SimRequest] = []
    for where, data in records:
        request = parse_request(data, where, streams, max_model_len)
        if request.id in seen:
            raise _field_error(where, "id", f"duplicate id {request.id!r}")
        seen.add(request.id)
        out.append(request)
    if not out:
        raise InputError("no requests given")
    return sorted(out, key=lambda r: (r.arrival_s, r.id))


def load_requests(path: Path, max_model_len: int, seed: int = 0) -> list[SimRequest]:
    """Read and validate a request JSONL file (see the module docstring)."""
    lines = jsonin.read_text(path).splitlines()

    def records() -> Iterable[tuple[str, Mapping[str, Any]]]:
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            where = f"{path}:{number}"
            yield where, jsonin.loads(line, where)

    return parse_requests(records(), max_model_len, seed)
