"""Engine samples (`samples.jsonl`): an engine's state over time, one sample a line.

Each line: `engine` (the record's `engine`: `sim0`, ... or an endpoint URL), `t` (seconds from the run's
start), `kv_usage` (0-1, blocks held by requests, as `vllm:kv_cache_usage_perc`), `running`, `waiting`,
`preemptions_total`, `cpu_tier_blocks` (the fields of `EngineSample`). Keys are sorted. Runs against a
gateway (the admission experiment's endpoint mode) write the gateway's own rows in the same file: every
row has `engine` and `t`; `read_samples` / `read_sample_rows` accept only engine samples.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flatshare import jsonin
from flatshare.errors import InputError
from flatshare.runfiles.files import row_lines, write_atomic
from flatshare.runfiles.records import MAX_TIME_S


@dataclass(frozen=True)
class EngineSample:
    """The engine's state at time `t`, as vLLM exports it on /metrics."""

    t: float
    kv_usage: float
    running: int
    waiting: int
    preemptions_total: int
    cpu_tier_blocks: int

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def sample_rows(samples: Iterable[tuple[str, EngineSample]]) -> Iterator[dict[str, Any]]:
    """Each (engine, sample) as its row of `samples.jsonl`."""
    for engine, s in samples:
        yield {"engine": engine, **s.to_json()}


def sample_lines(samples: Iterable[tuple[str, EngineSample]]) -> Iterator[str]:
    """Each sample as its line of `samples.jsonl`: with its engine's name, keys sorted."""
    return row_lines(sample_rows(samples))


def write_samples(path: Path, samples: Iterable[tuple[str, EngineSample]]) -> None:
    """Write `samples.jsonl` (atomically and safely, `flatshare.safeout`)."""
    write_atomic(path, lambda f: f.writelines(sample_lines(samples)))


_SAMPLE_INTS = ("running", "waiting", "preemptions_total", "cpu_tier_blocks")


def sample_from_row(data: Any, where: str) -> tuple[str, EngineSample]:
    """(engine, sample) of one decoded `samples.jsonl` line; InputError naming `where` and the field
    unless it is an object of exactly `engine` (a string) and the sample's fields: `t` a time in
    [0, MAX_TIME_S] s, `kv_usage` in [0, 1], the counts integers >= 0."""
    if not isinstance(data, dict):
        raise InputError(f"{where}: a sample must be a JSON object")
    expected = {"engine", "t", "kv_usage", *_SAMPLE_INTS}
    if set(data) != expected:
        odd = sorted(expected ^ set(data))[0]
        raise InputError(
            f"{where}: not a sample (field {odd!r} {'missing' if odd in expected else 'unknown'})"
        )
    if not isinstance(data["engine"], str):
        raise InputError(f"{where}: field 'engine': expected a string")
    for name, high in (("t", MAX_TIME_S), ("kv_usage", 1.0)):
        value = data[name]
        if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= high:
            raise InputError(f"{where}: field {name!r}: {value!r} is not a number in [0, {high:g}]")
    for name in _SAMPLE_INTS:
        value = data[name]
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise InputError(f"{where}: field {name!r}: {value!r} is not an integer >= 0")
    fields = {k: v for k, v in data.items() if k != "engine"}
    return data["engine"], EngineSample(**fields)


def read_samples(path: Path) -> list[tuple[str, EngineSample]]:
    """Read `samples.jsonl` back, within `flatshare.jsonin`'s limits; errors name the file and line."""
    return [sample_from_row(jsonin.loads(line, where), where) for where, line in jsonin.read_lines(path)]


def read_sample_rows(path: Path) -> list[dict[str, Any]]:
    """`samples.jsonl`'s lines as decoded, each checked by `sample_from_row`."""
    rows = []
    for where, line in jsonin.read_lines(path):
        row = jsonin.loads(line, where)
        sample_from_row(row, where)
        rows.append(row)
    return rows
