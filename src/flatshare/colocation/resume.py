"""Resuming an interrupted experiment: which of a plan's runs are already saved, by the same plan.

A full co-location plan is hundreds of runs (hours on a laptop). Each run's folder is written atomically
(`flatshare.runfiles.files.atomic_folder`), so a folder that exists is whole. Every run records the plan
facts that shape it (`ColocationPlan.run_facts`: the setup, the duration, the drain and the number of
agents; the condition, caller count and seed are its folder's name). A resumed plan keeps a saved run only
when those facts are the plan's own; a saved run of another plan (or of a flatshare that did not record
them) is an error that names the folder and the first fact that differs, never a silent mix of two plans.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from flatshare.colocation.runs import FACTS, run_dir
from flatshare.errors import InputError
from flatshare.runfiles.files import read_json


def is_saved(out: Path, plan_facts: Mapping[str, Any], condition: str, callers: int, seed: int) -> bool:
    """Whether the run (`condition`, `callers`, `seed`) of the plan whose run facts are `plan_facts` is
    saved under `out`; InputError when a run is saved there by another plan."""
    folder = run_dir(out, condition, callers, seed)
    if not folder.is_dir():
        return False
    facts = read_json(folder / FACTS)
    for name, value in plan_facts.items():
        if name not in facts:
            raise InputError(
                f"{folder}: saved without `{name}` (by an older flatshare): cannot resume into it"
            )
        if facts[name] != _as_saved(value):
            raise InputError(
                f"{folder}: saved by another plan ({name} {_short(facts[name])}, this plan's "
                f"{_short(value)}): resume with the same options, or use another --out"
            )
    return True


def _as_saved(value: Any) -> Any:
    """`value` as it reads back from a saved JSON file (tuples become lists)."""
    return json.loads(json.dumps(value))


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."
