"""A replay's output folder: `requests.jsonl` (records), `samples.jsonl` (engine samples), `run.json`.

Both drivers write the same three files (see docs/records.md); `flatshare sim` writes the same
`requests.jsonl` and `samples.jsonl` (`write_samples`) beside its `summary.json`. Each file is written to a temporary name
and renamed, so a folder never holds a half-written file, even when the run was interrupted.

`samples.jsonl`, one sample a line: `engine` (the record's `engine`: `sim0`, ... or an endpoint URL),
`t` (seconds from the run's start), `kv_usage` (0-1), `running`, `waiting`, `preemptions_total`,
`cpu_tier_blocks` (the fields of `flatshare.sim.records.EngineSample`).

`run.json`: `run_version`, `record_version`, `driver` (`virtual` or `wallclock`), `spec`, `seed`,
`workload`, `workload_requests`, `vocab_size`, `max_model_len` (prompts clipped to it; null: none),
`duration_s` (null: the whole workload), `started_at` (UTC, ISO 8601), `wall_s`, `interrupted`,
`requests` (recorded) and `statuses` (count by status); then the driver's settings: `engine`, `profile`,
`engines`, `virtual_s` (virtual) or `endpoints`, `options`, `stats` (wall clock).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import IO, Any

from flatshare import jsonin, safeout
from flatshare.errors import InputError
from flatshare.replay.records import MAX_TIME_S, RECORD_VERSION, ReplayRecord, record_lines
from flatshare.sim.records import EngineSample

RUN_VERSION = 1
REQUESTS, SAMPLES, RUN = "requests.jsonl", "samples.jsonl", "run.json"


def check_out(out: Path) -> None:
    """InputError if `--out` names something that is not a folder (checked before any work is done)."""
    if out.exists() and not out.is_dir():
        raise InputError(f"--out {out}: exists and is not a folder")
    above = next((p for p in out.parents if p.exists()), None)
    if above is not None and not above.is_dir():
        raise InputError(f"--out {out}: {above} is not a folder")


def prepare(out: Path) -> Path:
    """Make the output folder (InputError if it is a file or cannot be made)."""
    check_out(out)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError(f"--out {out}: cannot create it ({exc.strerror})") from exc
    return out


def run_summary(records: Sequence[ReplayRecord]) -> dict[str, Any]:
    """`requests` and `statuses` for run.json."""
    return {"requests": len(records), "statuses": dict(sorted(Counter(r.status for r in records).items()))}


def write_run(
    out: Path,
    records: Sequence[ReplayRecord],
    samples: Iterable[tuple[str, EngineSample]],
    meta: dict[str, Any],
) -> dict[str, Any]:
    """Write the three files into `out` (made if needed); returns what went into run.json."""
    prepare(out)
    write_atomic(out / REQUESTS, lambda f: f.writelines(record_lines(records)))
    write_atomic(out / SAMPLES, lambda f: f.writelines(sample_lines(samples)))
    run = {"run_version": RUN_VERSION, "record_version": RECORD_VERSION, **meta, **run_summary(records)}
    write_atomic(out / RUN, lambda f: f.write(json.dumps(run, indent=2, sort_keys=True) + "\n"))
    return run


def sample_lines(samples: Iterable[tuple[str, EngineSample]]) -> Iterator[str]:
    """Each sample as its line of `samples.jsonl`: with its engine's name, keys sorted."""
    for engine, s in samples:
        yield json.dumps({"engine": engine, **s.to_json()}, sort_keys=True) + "\n"


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


def write_atomic(path: Path, write: Callable[[IO[str]], object]) -> None:
    """Call `write` on a text file that becomes `path` only when complete (`flatshare.safeout`): `path` is
    either untouched or complete, also after an error or Ctrl-C, and a symlink planted at `path` or at any
    temporary name is never written through."""
    safeout.write_file(path, write)
