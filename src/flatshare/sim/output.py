"""Writing a simulation's results: `requests.jsonl`, `samples.jsonl`, `summary.json`.

`requests.jsonl` and `samples.jsonl` are the formats `flatshare replay` writes (docs/records.md): each
request is its own session (`session_id` is its id) on engine `sim0`, as `flatshare replay --sim` names
its first engine. Files are written to a temporary folder beside DIR and moved into place only when all are complete,
so a failed run never leaves half-written output. The summary holds only virtual-time figures, so the
same inputs and seed give byte-identical files.
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import tempfile
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

from flatshare.runfiles.records import RECORD_VERSION, ReplayRecord, write_records
from flatshare.runfiles.samples import write_samples
from flatshare.runfiles.sim_records import SIM_ENGINE, RequestRecord
from flatshare.sim.engine import SimResult


def _percentiles(values: list[float]) -> dict[str, float | None]:
    if not values:
        return {"p50": None, "p95": None, "p99": None, "mean": None, "max": None}
    arr = np.asarray(values, dtype=float)
    pct = np.percentile(arr, [50, 95, 99])
    return {
        "p50": round(float(pct[0]), 6),
        "p95": round(float(pct[1]), 6),
        "p99": round(float(pct[2]), 6),
        "mean": round(float(arr.mean()), 6),
        "max": round(float(arr.max()), 6),
    }


def _gaps(record: RequestRecord) -> list[float]:
    times = record.token_times_s
    return [b - a for a, b in itertools.pairwise(times)]


def summarize(result: SimResult, meta: dict[str, Any]) -> dict[str, Any]:
    """Per-class TTFT, inter-token gaps and throughput, plus engine totals."""
    by_class: dict[str, list[RequestRecord]] = defaultdict(list)
    for record in result.records:
        by_class[record.cls or f"priority-{record.priority}"].append(record)
    classes = {}
    for name, records in sorted(by_class.items()):
        ttfts = [r.ttft_s for r in records if r.ttft_s is not None]
        gaps = [g for r in records for g in _gaps(r)]
        tokens = sum(len(r.token_times_s) for r in records)
        classes[name] = {
            "requests": len(records),
            "finished": sum(r.status == "finished" for r in records),
            "output_tokens": tokens,
            "output_tokens_per_s": round(tokens / result.virtual_s, 6) if result.virtual_s > 0 else None,
            "preemptions": sum(r.preemptions for r in records),
            "ttft_s": _percentiles(ttfts),
            "inter_token_s": _percentiles(gaps),
        }
    return {
        "record_version": RECORD_VERSION,
        **meta,
        "requests": len(result.records),
        "steps": result.steps,
        "virtual_s": round(result.virtual_s, 6),
        "preemptions": result.preemptions,
        "cpu_tier_loaded_tokens": result.cpu_loaded_tokens,
        "scheduler_counters": result.scheduler_counters,
        "classes": classes,
    }


def written_records(result: SimResult) -> list[ReplayRecord]:
    """The run's records as written: each request its own session, on engine `sim0`."""
    return [r.to_record(session_id=r.id, engine=SIM_ENGINE, now=result.virtual_s) for r in result.records]


def write_result(out_dir: Path, result: SimResult, meta: dict[str, Any]) -> dict[str, Any]:
    """Write the three files into `out_dir` atomically (all or nothing). Returns the summary."""
    summary = summarize(result, meta)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}-", dir=out_dir.parent))
    try:
        write_records(staging / "requests.jsonl", written_records(result))
        write_samples(staging / "samples.jsonl", [(SIM_ENGINE, s) for s in result.samples])
        (staging / "summary.json").write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n")
        out_dir.mkdir(exist_ok=True)
        for name in ("requests.jsonl", "samples.jsonl", "summary.json"):
            os.replace(staging / name, out_dir / name)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return summary
