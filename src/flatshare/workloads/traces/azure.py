"""Azure LLM inference trace 2023 (Patel et al., Splitwise, ISCA 2024; CC-BY 4.0).

File format: CSV with the header `TIMESTAMP,ContextTokens,GeneratedTokens`, one request a row, e.g.
`2023-11-16 18:15:46.6805900,374,44` (a naive timestamp with up to 9 fractional digits; the trace has 7).
The trace has no prompt text and no prefix information: each prompt is unique text.
"""

from __future__ import annotations

import csv
import re
from datetime import UTC, datetime
from pathlib import Path

from flatshare.errors import InputError
from flatshare.workloads.model import Workload, WorkloadRequest
from flatshare.workloads.tokens import unique_span
from flatshare.workloads.traces.options import TraceOptions, bad, check_path, make_request, open_loop

FIELDS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
TIMESTAMP = re.compile(r"(\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2})(?:\.(\d{1,9}))?")


def parse_timestamp(text: str) -> float:
    """Seconds since the epoch of an Azure trace timestamp (read as UTC; only differences matter)."""
    m = TIMESTAMP.fullmatch(text.strip())
    if m is None:
        raise ValueError(f"expected a time like 2023-11-16 18:15:46.6805900, got {text!r}")
    whole = datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S").replace(tzinfo=UTC).timestamp()
    frac = m.group(2) or "0"
    return whole + int(frac) / 10 ** len(frac)


def _count(path: Path, line: int, field: str, text: str, low: int) -> int:
    try:
        value = int(text)
    except ValueError:
        raise bad(path, f"line {line}", field, f"expected an integer, got {text!r}") from None
    if value < low:
        raise bad(path, f"line {line}", field, f"expected an integer >= {low}, got {value}")
    return value


def read_rows(path: Path) -> list[tuple[float, int, int]]:
    """`(timestamp_s, context_tokens, generated_tokens)` for every row, all validated."""
    rows: list[tuple[float, int, int]] = []
    with path.open(newline="") as f:
        reader = csv.reader(f)
        header = [h.strip() for h in next(reader, [])]
        for name in FIELDS:
            if name not in header:
                raise bad(path, "line 1 (header)", name, f"missing; the header is {header}")
        cols = [header.index(name) for name in FIELDS]
        for row in reader:
            line = reader.line_num
            if not row:
                continue
            if len(row) != len(header):
                raise bad(path, f"line {line}", FIELDS[0], f"expected {len(header)} columns, got {len(row)}")
            stamp, ctx, gen = (row[c] for c in cols)
            try:
                t = parse_timestamp(stamp)
            except ValueError as e:
                raise bad(path, f"line {line}", "TIMESTAMP", str(e)) from None
            rows.append((t, _count(path, line, FIELDS[1], ctx, 1), _count(path, line, FIELDS[2], gen, 0)))
    if not rows:
        raise InputError(f"{path}: the file has no records")
    return rows


def load_azure(
    path: Path | str, options: TraceOptions | None = None, *, cls: str = "chat", name: str | None = None
) -> Workload:
    """An open-loop workload from an Azure LLM 2023 CSV: one request per row, issued at its timestamp.

    Times are relative to the earliest row, then windowed and scaled by `options`. Prompts are unique spans of
    `ContextTokens`; `max_tokens = max(1, GeneratedTokens)` (a reply of 0 tokens still takes one step).
    Use `cls="code"` for the code service's trace.
    """
    p = check_path(path)
    opts = options or TraceOptions()
    rows = read_rows(p)
    t0 = min(t for t, _, _ in rows)
    stem = name or p.stem
    requests: list[WorkloadRequest] = []
    for i, (t, ctx, gen) in enumerate(rows):
        if not opts.in_window(t - t0):
            continue
        rid = f"{stem}/{i}"
        requests.append(
            make_request(
                id=rid,
                cls=cls,
                options=opts,
                prompt=(unique_span(f"azure/{rid}", ctx),),
                max_tokens=max(1, gen),
                arrival_s=opts.scaled(t - t0),
            )
        )
        if opts.limit is not None and len(requests) >= opts.limit:
            break
    return open_loop(stem, requests, p)
