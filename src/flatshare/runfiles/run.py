"""A run folder: `requests.jsonl` (records), `samples.jsonl` (engine samples), a JSON file of facts, and
any further tables (JSONL) an experiment keeps beside them. Every file is written atomically
(`flatshare.runfiles.files.write_atomic`), so a folder never holds a half-written file.

`write_run` / `load_run` write and read one folder; where it lies, what its facts say and which tables it
has is each experiment's folder scheme (`flatshare.colocation.runs`: `engine.json`;
`flatshare.admission.runs`: `run.json`, `occupancy.jsonl`, `decisions.jsonl`).

The drivers' folder (`flatshare replay`, both drivers; see docs/records.md) is `write_replay_run`'s:
`run.json` holds `run_version`, `record_version`, `driver` (`virtual` or `wallclock`), `spec`, `seed`,
`workload`, `workload_requests`, `vocab_size`, `max_model_len` (prompts clipped to it; null: none),
`duration_s` (null: the whole workload), `started_at` (UTC, ISO 8601), `wall_s`, `interrupted`,
`requests` (recorded) and `statuses` (count by status); then the driver's settings: `engine`, `profile`,
`engines`, `virtual_s` (virtual) or `endpoints`, `options`, `stats` (wall clock). `flatshare sim` writes
the same `requests.jsonl` and `samples.jsonl` beside its `summary.json`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from flatshare.runfiles.files import prepare, read_json, read_jsonl, write_json, write_jsonl
from flatshare.runfiles.records import RECORD_VERSION, ReplayRecord, read_records, write_records
from flatshare.runfiles.samples import EngineSample, sample_rows

RUN_VERSION = 1
REQUESTS, SAMPLES, RUN = "requests.jsonl", "samples.jsonl", "run.json"
Rows = Iterable[dict[str, Any]]
CheckFacts = Callable[[dict[str, Any], str], dict[str, Any]]


@dataclass(frozen=True)
class RunFiles:
    """One run folder as read back: its records, sample rows (each with `engine` and `t`), facts, and
    the further tables asked for (file name -> rows)."""

    records: list[ReplayRecord]
    samples: list[dict[str, Any]]
    facts: dict[str, Any]
    tables: dict[str, list[dict[str, Any]]] = field(default_factory=dict)


def write_run(
    folder: Path,
    records: Iterable[ReplayRecord],
    samples: Rows,
    facts: dict[str, Any],
    *,
    facts_file: str = RUN,
    tables: Mapping[str, Rows] | None = None,
) -> None:
    """Write one run's files into `folder` (module doc), each atomically; the facts file last."""
    write_records(folder / REQUESTS, records)
    write_jsonl(folder / SAMPLES, samples)
    for name, rows in (tables or {}).items():
        write_jsonl(folder / name, rows)
    write_json(folder / facts_file, facts)


def _facts_as_read(facts: dict[str, Any], where: str) -> dict[str, Any]:
    return facts


def load_run(
    folder: Path,
    *,
    facts_file: str = RUN,
    check_facts: CheckFacts = _facts_as_read,
    tables: Sequence[str] = (),
    read_samples: Callable[[Path], list[dict[str, Any]]] = read_jsonl,
) -> RunFiles:
    """Read one run folder, every file bounded and checked as it is read (facts by `check_facts`, then
    records by their schema, samples by `read_samples`, then `tables`): a malformed folder is an
    InputError naming the file (and line)."""
    where = folder / facts_file
    facts = check_facts(read_json(where), str(where))
    records = read_records(folder / REQUESTS)
    samples = read_samples(folder / SAMPLES)
    return RunFiles(records, samples, facts, {name: read_jsonl(folder / name) for name in tables})


def run_summary(records: Sequence[ReplayRecord]) -> dict[str, Any]:
    """`requests` and `statuses` for run.json."""
    return {"requests": len(records), "statuses": dict(sorted(Counter(r.status for r in records).items()))}


def write_replay_run(
    out: Path,
    records: Sequence[ReplayRecord],
    samples: Iterable[tuple[str, EngineSample]],
    meta: dict[str, Any],
) -> dict[str, Any]:
    """A driver's run folder `out` (made if needed; module doc); returns what went into run.json."""
    prepare(out)
    run = {"run_version": RUN_VERSION, "record_version": RECORD_VERSION, **meta, **run_summary(records)}
    write_run(out, records, sample_rows(samples), run)
    return run
