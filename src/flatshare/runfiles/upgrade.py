"""Old request record files to the current format (`flatshare records upgrade IN OUT`).

Two old kinds, both once marked version 1, are read line by line (a file may mix them):
- `flatshare sim`'s record (no `version`; `arrival_s`, `finish_s`, `status: finished`): rebuilt as the
  engine's `RequestRecord` and written by its `to_record`, as `flatshare sim` writes it now: each request
  its own session, engine `sim0`, `first_sentence_tokens` null, `wait_s` rounded to 6 decimals;
- the replay record of version 1: unchanged but for `version` and the new simulator-only `preemptions`
  (null: version 1 did not record it).
A line already of the current version is kept as it is. Every result is checked against the schema.
OUT is written to a temporary file created exclusively beside it and renamed into place
(`flatshare.safeout`: never through a planted symlink); IN is never overwritten. IN is read within
`flatshare.jsonin`'s bounds (a line of at most 16 MiB: `/dev/zero` is refused).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from flatshare.errors import InputError
from flatshare.runfiles.records import (
    RECORD_VERSION,
    ReplayRecord,
    decode_lines,
    old_format,
    schema_problems,
    write_records,
)
from flatshare.runfiles.sim_records import SIM_ENGINE, RequestRecord

_SIM_REQUIRED = (
    "id",
    "cls",
    "priority",
    "arrival_s",
    "prompt_tokens",
    "max_tokens",
    "token_times_s",
    "status",
)
_SIM_OPTIONAL = ("first_scheduled_s", "finish_s", "preemptions", "finish_reason", "wait_s")


def upgrade_row(data: Any, where: str) -> tuple[str, ReplayRecord]:
    """(the kind it was: `sim-1`, `replay-1` or `2`, the record); InputError naming `where` and a field."""
    if not isinstance(data, dict):
        raise InputError(f"{where}: a record must be a JSON object")
    kind = old_format(data) or str(data.get("version"))
    if kind == "sim-1":
        upgraded = _from_sim(data, where).to_json()
    elif kind == "replay-1":
        upgraded = {"first_scheduled_s": None, "wait_s": None, "preemptions": None}
        upgraded |= {**data, "version": RECORD_VERSION}
    else:
        upgraded = data
    problems = schema_problems(upgraded)
    if problems:
        raise InputError(f"{where}: {problems[0]}")
    return kind, ReplayRecord.from_json(upgraded, where)


def _from_sim(data: dict[str, Any], where: str) -> ReplayRecord:
    missing = [name for name in _SIM_REQUIRED if name not in data]
    if missing:
        raise InputError(f"{where}: field '{missing[0]}': missing (an old `flatshare sim` record)")
    fields = {name: data[name] for name in (*_SIM_REQUIRED, *_SIM_OPTIONAL) if name in data}
    fields.setdefault("wait_s", {})
    if fields.get("preemptions") is None:
        fields["preemptions"] = 0
    try:
        record = RequestRecord(**fields)
        last = record.token_times_s[-1] if record.token_times_s else record.arrival_s
        now = record.finish_s if record.finish_s is not None else last
        return record.to_record(session_id=record.id, engine=SIM_ENGINE, now=now)
    except (TypeError, ValueError, AttributeError, IndexError) as exc:
        raise InputError(f"{where}: not a valid old `flatshare sim` record ({exc})") from exc


def upgrade_file(source: Path, target: Path) -> dict[str, int]:
    """Write `source`'s records, upgraded, to `target` (atomically); returns how many of each kind.
    InputError (nothing written) for a bad line, a `target` that is `source` or a folder."""
    if target.exists() and (target.is_dir() or (source.exists() and target.samefile(source))):
        what = "is a folder" if target.is_dir() else "is the input file (write the upgrade elsewhere)"
        raise InputError(f"OUT {target}: {what}")
    kinds: Counter[str] = Counter()
    records = []
    for where, data in decode_lines(source):
        kind, record = upgrade_row(data, where)
        kinds[kind] += 1
        records.append(record)
    write_records(target, records)
    return dict(sorted(kinds.items()))
