"""Mooncake FAST'25 traces (kvcache-ai/Mooncake, Apache-2.0).

File format: JSON Lines, one request a line:
`{"timestamp": 0, "input_length": 6758, "output_length": 500, "hash_ids": [0, 1, ...]}` with `timestamp` in
milliseconds and one hash id per 512-token block of the input (the last block may be partial). Equal hash
ids mean equal blocks, so requests that start with the same ids share a cacheable prefix.
"""

from __future__ import annotations

import json
from pathlib import Path

from flatshare.errors import InputError
from flatshare.workloads.model import Workload, WorkloadRequest
from flatshare.workloads.tokens import hash_block_spans
from flatshare.workloads.traces.options import (
    TraceOptions,
    bad,
    check_path,
    hash_ids_field,
    int_field,
    make_request,
    open_loop,
    seconds_field,
)

BLOCK_TOKENS = 512


def read_records(path: Path, block_tokens: int = BLOCK_TOKENS) -> list[tuple[float, int, int, list[int]]]:
    """`(timestamp_s, input_length, output_length, hash_ids)` for every line, all validated."""
    records: list[tuple[float, int, int, list[int]]] = []
    with path.open() as f:
        for line_no, line in enumerate(f, start=1):
            if not line.strip():
                continue
            where = f"line {line_no}"
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as e:
                raise bad(path, where, "(record)", f"not valid JSON: {e.msg}") from None
            if not isinstance(rec, dict):
                raise bad(path, where, "(record)", "expected a JSON object")
            t_ms = seconds_field(path, where, rec, "timestamp")
            n_in = int_field(path, where, rec, "input_length", 1)
            n_out = int_field(path, where, rec, "output_length", 0)
            hids = hash_ids_field(path, where, rec, block_tokens, n_in)
            records.append((t_ms / 1000.0, n_in, n_out, hids))
    if not records:
        raise InputError(f"{path}: the file has no records")
    return records


def load_mooncake(path: Path | str, options: TraceOptions | None = None, *, cls: str = "chat") -> Workload:
    """An open-loop workload from a Mooncake JSONL trace: one request per line, issued at its timestamp.

    Times are relative to the earliest record, then windowed and scaled by `options`. Prompts are built from
    `hash_ids` (see `tokens.hash_block_spans`, namespaced by the file name), so shared prefixes in the trace
    are shared token ids; `max_tokens = max(1, output_length)`.
    """
    p = check_path(path)
    opts = options or TraceOptions()
    records = read_records(p)
    t0 = min(r[0] for r in records)
    stem = p.stem
    requests: list[WorkloadRequest] = []
    for i, (t, n_in, n_out, hids) in enumerate(records):
        if not opts.in_window(t - t0):
            continue
        requests.append(
            make_request(
                id=f"{stem}/{i}",
                cls=cls,
                options=opts,
                prompt=hash_block_spans(hids, BLOCK_TOKENS, n_in, namespace=f"mooncake/{stem}"),
                max_tokens=max(1, n_out),
                arrival_s=opts.scaled(t - t0),
            )
        )
        if opts.limit is not None and len(requests) >= opts.limit:
            break
    return open_loop(stem, requests, p)
