"""Saved admission runs: one folder per (workload, condition, seed), read back by the analysis alone.

Layout under an experiment folder: `experiment.json` (`{"kind": "admission", ...}`, the plan) and
`runs/<workload>/<condition>/s<seed>/` holding
- `requests.jsonl`: replay records (`flatshare.runfiles.records`; `engine` names the engine that served it);
- `samples.jsonl`: engine samples (`t`, `kv_usage`, `running`, `waiting`, ...) with an `engine` field;
- `occupancy.jsonl`: per-engine KV holdings per request over time (`cluster.OccupancyRecorder`);
- `decisions.jsonl`: routing decisions with the snapshots they saw (`cluster.DecisionRecord`);
- `run.json`: the facts: `workload`, `part` (`synthetic`, `trace` or `alone`), `engines`, `condition`
  (`key`, `routing_policy` (`policy` in runs saved before the rename; read as `routing_policy`), `prefer`,
  `make_room`, `sage`), `seed`, `thresholds` (or null), `long_input_tokens` (prompts above it count as
  long), `replay_s` and `eval_from_s` (the evaluation covers requests sent in
  `[eval_from_s, replay_s)`), `engine_config`, `profile`, `preemptions`, `steps`, `virtual_s`,
  `scheduler_counters`, `wall_s` (seconds the simulation took), and for traces `spec` and `calibration`.

Runs against a running gateway (`endpoint.py`, written by `save_wallclock_run`) have the same files:
`requests.jsonl` from the wall-clock driver (`engine` is the backend named by `x-flatshare-backend`),
`samples.jsonl` from polling the gateway's `/gateway/backends`, `decisions.jsonl` from each answer's
routing headers, and an empty `occupancy.jsonl` (per-request KV holdings are not visible from outside
the engines). Their `run.json` has `mode` `endpoint`, `endpoint` (the URL), `backends` (names),
`model`, `profile` and `engine_config` null, and `preemptions` (summed over the backends during the run).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flatshare.admission.cluster import ClusterRun, DecisionRecord
from flatshare.errors import InputError
from flatshare.runfiles.files import atomic_folder, read_json, write_json
from flatshare.runfiles.records import ReplayRecord
from flatshare.runfiles.run import load_run as load_files
from flatshare.runfiles.run import write_run
from flatshare.runfiles.samples import sample_rows

MARKER = "experiment.json"
OCCUPANCY, DECISIONS = "occupancy.jsonl", "decisions.jsonl"


@dataclass(frozen=True)
class SavedRun:
    workload: str
    condition: str
    seed: int
    records: list[ReplayRecord]
    samples: list[dict[str, Any]]
    occupancy: list[dict[str, Any]]
    decisions: list[DecisionRecord]
    facts: dict[str, Any]


def run_dir(root: Path, workload: str, condition: str, seed: int) -> Path:
    return root / "runs" / workload / condition / f"s{seed}"


def save_run(target: Path, cluster: ClusterRun, facts: dict[str, Any]) -> None:
    """Write one run's raw data and facts, atomically (`flatshare.runfiles.files.atomic_folder`); the
    engines' totals (`VirtualRun.totals`) and the run's wall time are added to `facts`."""
    run = cluster.run
    facts = facts | run.totals() | {"wall_s": cluster.wall_s}
    tables = {OCCUPANCY: cluster.occupancy, DECISIONS: (d.to_json() for d in cluster.decisions)}
    with atomic_folder(target) as folder:
        write_run(folder, run.records, sample_rows(run.samples), facts, tables=tables)


def save_wallclock_run(
    target: Path,
    records: Iterable[ReplayRecord],
    samples: Iterable[dict[str, Any]],
    decisions: Iterable[DecisionRecord],
    facts: dict[str, Any],
) -> None:
    """Write one wall-clock run (against a gateway) in the same layout, atomically; no occupancy data."""
    tables = {OCCUPANCY: [], DECISIONS: (d.to_json() for d in decisions)}
    with atomic_folder(target) as folder:
        write_run(folder, records, samples, facts, tables=tables)


_NUMBER = (int, float)
_FACTS: dict[str, tuple[type, ...]] = {
    "workload": (str,),
    "condition": (dict,),
    "seed": (int,),
    "part": (str,),
    "preemptions": _NUMBER,
    "eval_from_s": _NUMBER,
    "engines": (int,),
}
_NULLABLE_FACTS: dict[str, tuple[type, ...]] = {
    "replay_s": _NUMBER,
    "long_input_tokens": (int,),
    "thresholds": (dict,),
    "engine_config": (dict,),
    "profile": (str,),
}


def check_facts(facts: dict[str, Any], where: str) -> dict[str, Any]:
    """`run.json` as the analysis reads it: each field it uses present with its type (numbers finite:
    `flatshare.jsonin`), `condition` naming a `key` and a `routing_policy` (runs saved before the rename
    name it `policy`: read as `routing_policy`); InputError naming `where` otherwise."""
    for name, types in {**_FACTS, **_NULLABLE_FACTS}.items():
        value = facts.get(name)
        if value is None and name in _NULLABLE_FACTS:
            continue
        if isinstance(value, bool) or not isinstance(value, types):
            kinds = "/".join(t.__name__ for t in types)
            raise InputError(f"{where}: {name} must be {kinds}, got {value!r:.60}")
    condition = _condition(facts["condition"])
    if not all(isinstance(condition.get(key), str) for key in ("key", "routing_policy")):
        raise InputError(f"{where}: condition must name a key and a routing_policy")
    return facts | {"condition": condition}


def _condition(saved: dict[str, Any]) -> dict[str, Any]:
    """A saved run's `condition`, its routing policy under `routing_policy` also when the run was saved
    before the rename (as `policy`)."""
    condition = dict(saved)
    if "routing_policy" not in condition and "policy" in condition:
        condition["routing_policy"] = condition.pop("policy")
    return condition


def load_run(folder: Path) -> SavedRun:
    run = load_files(folder, check_facts=check_facts, tables=(OCCUPANCY, DECISIONS))
    return SavedRun(
        workload=run.facts["workload"],
        condition=run.facts["condition"]["key"],
        seed=int(run.facts["seed"]),
        records=run.records,
        samples=run.samples,
        occupancy=run.tables[OCCUPANCY],
        decisions=[DecisionRecord.from_json(d) for d in run.tables[DECISIONS]],
        facts=run.facts,
    )


def load_runs(root: Path) -> list[SavedRun]:
    """Every saved run under `root/runs`, in a stable order (workload, condition, seed)."""
    folders = sorted(root.glob("runs/*/*/s*"), key=lambda p: (p.parts[-3], p.parts[-2], int(p.name[1:])))
    return [load_run(folder) for folder in folders if (folder / "run.json").is_file()]


def write_marker(root: Path, plan: dict[str, Any]) -> None:
    write_json(root / MARKER, {"kind": "admission", "plan": plan})


def is_admission_experiment(root: Path) -> bool:
    """Whether `root` holds an admission experiment (`flatshare report` can dispatch on this)."""
    marker = root / MARKER
    return marker.is_file() and read_json(marker).get("kind") == "admission"
