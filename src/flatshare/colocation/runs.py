"""Saved runs: one folder per (condition, callers, seed) with records, samples and engine facts.

Layout under an experiment folder: `runs/<condition>/c<callers>/s<seed>/` holding `requests.jsonl`
(replay records, see `flatshare.replay.records`), `samples.jsonl` (engine samples with an `engine` field)
and `engine.json` (engine settings, preemptions, steps, virtual seconds, scheduler counters, duration, and
the gateway-side baseline's counters `gate_counters` when the condition has one).
Analysis reads only these files.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flatshare.lab.rundir import atomic_folder, json_text, read_json, read_jsonl, write_jsonl
from flatshare.replay.records import ReplayRecord, read_records, write_records
from flatshare.replay.virtual import VirtualRun
from flatshare.sim.records import EngineSample


@dataclass(frozen=True)
class SavedRun:
    condition: str
    callers: int
    seed: int
    records: list[ReplayRecord]
    samples: list[dict[str, Any]]
    engine: dict[str, Any]


def run_dir(root: Path, condition: str, callers: int, seed: int) -> Path:
    return root / "runs" / condition / f"c{callers}" / f"s{seed}"


def save_run(target: Path, run: VirtualRun, facts: dict[str, Any]) -> None:
    """Write one run's folder atomically (`flatshare.lab.rundir.atomic_folder`); engine totals are added
    to `facts`."""
    engines = run.engines
    facts = facts | {
        "preemptions": sum(e.preemptions for e in engines),
        "steps": sum(e.steps for e in engines),
        "virtual_s": max(e.now for e in engines),
        "scheduler_counters": _sum_counters([e.result().scheduler_counters for e in engines]),
    }
    if run.gate_counters:
        facts["gate_counters"] = run.gate_counters
    with atomic_folder(target) as folder:
        write_records(folder / "requests.jsonl", run.records)
        write_jsonl(folder / "samples.jsonl", ({"engine": e, **s.to_json()} for e, s in run.samples))
        (folder / "engine.json").write_text(json_text(facts))


def _sum_counters(counters: list[dict[str, Any]]) -> dict[str, int]:
    total: dict[str, int] = {}
    for one in counters:
        for key, value in one.items():
            total[key] = total.get(key, 0) + int(value)
    return total


def load_runs(root: Path) -> list[SavedRun]:
    """Every saved run under `root/runs`, in a stable order."""
    out = []
    for folder in sorted((root / "runs").glob("*/c*/s*")):
        condition, callers, seed = folder.parts[-3], int(folder.parts[-2][1:]), int(folder.parts[-1][1:])
        samples = read_jsonl(folder / "samples.jsonl")
        engine = read_json(folder / "engine.json")
        out.append(
            SavedRun(condition, callers, seed, read_records(folder / "requests.jsonl"), samples, engine)
        )
    return out


def sample_from_json(data: dict[str, Any]) -> EngineSample:
    return EngineSample(**{k: v for k, v in data.items() if k != "engine"})
