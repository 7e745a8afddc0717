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
import os
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from flatshare.errors import InputError
from flatshare.replay.records import RECORD_VERSION, ReplayRecord, write_records
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
    write_atomic(out / REQUESTS, lambda path: write_records(path, records))
    write_atomic(out / SAMPLES, lambda path: write_samples(path, samples))
    run = {"run_version": RUN_VERSION, "record_version": RECORD_VERSION, **meta, **run_summary(records)}
    write_atomic(out / RUN, lambda path: path.write_text(json.dumps(run, indent=2, sort_keys=True) + "\n"))
    return run


def write_samples(path: Path, samples: Iterable[tuple[str, EngineSample]]) -> None:
    """Write `samples.jsonl`: each sample with its engine's name, keys sorted (not atomic)."""
    lines = [json.dumps({"engine": engine, **s.to_json()}, sort_keys=True) for engine, s in samples]
    path.write_text("".join(f"{line}\n" for line in lines))


def read_samples(path: Path) -> list[tuple[str, EngineSample]]:
    """Read `samples.jsonl` back; errors name the file and line."""
    out = []
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        if not line.strip():
            continue
        try:
            data = json.loads(line)
            engine = data.pop("engine")
            out.append((str(engine), EngineSample(**data)))
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            raise InputError(f"{path}:{number}: not a sample ({exc})") from exc
    return out


def write_atomic(path: Path, write: Callable[[Path], object]) -> None:
    """Call `write` on a temporary name beside `path`, then rename it into place: `path` is either
    untouched or complete, also after an error or Ctrl-C (the temporary file is then removed)."""
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        write(tmp)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
