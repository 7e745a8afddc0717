"""Saved runs: one folder per (condition, callers, seed) with records, samples and engine facts.

Layout under an experiment folder: `runs/<condition>/c<callers>/s<seed>/` holding `requests.jsonl`
(replay records, see `flatshare.runfiles.records`), `samples.jsonl` (engine samples with an `engine` field)
and `engine.json` (engine settings, preemptions, steps, virtual seconds, scheduler counters, the step ledger
(`flatshare.sim.step_ledger`), the KV ledger (`flatshare.sim.kv_ledger`), duration, and the gateway-side baseline's counters `gate_counters` when the
condition has one).
Analysis reads only these files.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from flatshare.errors import InputError
from flatshare.runfiles.files import atomic_folder
from flatshare.runfiles.records import MAX_TIME_S, ReplayRecord
from flatshare.runfiles.run import load_run, write_run
from flatshare.runfiles.samples import read_sample_rows, sample_rows

if TYPE_CHECKING:
    from flatshare.replay.virtual import VirtualRun

FACTS = "engine.json"


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
    """Write one run's folder atomically (`flatshare.runfiles.files.atomic_folder`); the engines' totals
    (`VirtualRun.totals`) and the gate's counters are added to `facts`."""
    facts = facts | run.totals()
    if run.gate_counters:
        facts["gate_counters"] = run.gate_counters
    with atomic_folder(target) as folder:
        write_run(folder, run.records, sample_rows(run.samples), facts, facts_file=FACTS)


_CALLERS, _SEED = re.compile(r"c([0-9]{1,6})"), re.compile(r"s([0-9]{1,9})")
_COUNTERS = ("scheduler_counters", "gate_counters", "step_ledger", "kv_ledger")


def load_runs(root: Path) -> list[SavedRun]:
    """Every saved run under `root/runs`, in a stable order; every file is checked as it is read (bounded,
    typed: `check_facts`, the record schema, `flatshare.runfiles.samples.sample_from_row`), so a malformed
    folder is an InputError naming the file (and line), before anything is written."""
    out = []
    for folder in sorted((root / "runs").glob("*/c*/s*")):
        callers, seed = _CALLERS.fullmatch(folder.parts[-2]), _SEED.fullmatch(folder.parts[-1])
        if callers is None or seed is None:
            raise InputError(f"{folder}: not a run folder's name (runs/<condition>/c<callers>/s<seed>)")
        run = load_run(folder, facts_file=FACTS, check_facts=check_facts, read_samples=read_sample_rows)
        out.append(
            SavedRun(folder.parts[-3], int(callers[1]), int(seed[1]), run.records, run.samples, run.facts)
        )
    return out


def check_facts(facts: dict[str, Any], where: str) -> dict[str, Any]:
    """`engine.json` as the analysis reads it: `duration_s` a time > 0, `preemptions` an integer >= 0,
    the counters (`scheduler_counters`, `gate_counters`, `step_ledger`, `kv_ledger`) tables of numbers and
    `engine_config` a table when present; InputError naming `where` and the field otherwise."""
    duration, preemptions = facts.get("duration_s"), facts.get("preemptions")
    if isinstance(duration, bool) or not isinstance(duration, int | float) or not 0 < duration <= MAX_TIME_S:
        raise InputError(f"{where}: duration_s must be seconds in (0, {MAX_TIME_S:g}], got {duration!r}")
    if isinstance(preemptions, bool) or not isinstance(preemptions, int) or preemptions < 0:
        raise InputError(f"{where}: preemptions must be an integer >= 0, got {preemptions!r}")
    for name in _COUNTERS:
        counters = facts.get(name, {})
        if not isinstance(counters, dict) or any(
            isinstance(v, bool) or not isinstance(v, int | float) for v in counters.values()
        ):
            raise InputError(f"{where}: {name} must be a table of numbers")
    if not isinstance(facts.get("engine_config", {}), dict):
        raise InputError(f"{where}: engine_config must be a table")
    return facts
