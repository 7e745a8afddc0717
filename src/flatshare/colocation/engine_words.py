"""What a co-location report says the runs ran on: the simulated engine and its profile, or a real vLLM
(model, device, hardware, version, what it changed from the asked-for setup), and the scale."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from flatshare.colocation.runs import SavedRun


def engine_words(engine: Mapping[str, Any] | None) -> str:
    """The report title's engine: `simulated engine` or `real vLLM <version>, <model>`."""
    if not engine or engine.get("kind") != "vllm":
        return "simulated engine"
    return f"real vLLM {engine.get('vllm_version')}, {Path(str(engine.get('model'))).name}"


def engine_lines(engine: Mapping[str, Any] | None) -> list[str]:
    """The report's engine paragraph (and the real engine's changes as a list)."""
    if not engine:
        return []
    if engine.get("kind") != "vllm":
        return [f"Engine: simulated (profile `{engine.get('profile')}`), scale {engine.get('scale')}.", ""]
    lines = [
        f"Engine: real `vllm serve` {engine.get('vllm_version')} on {engine.get('device')} "
        f"({engine.get('hardware')}), model `{engine.get('model')}`, every token count at scale "
        f"{engine.get('scale')}; one fresh server per run, wall-clock replay.",
        "",
    ]
    notes = engine.get("notes") or []
    return lines + [f"- {note}" for note in notes] + ([""] if notes else [])


def shared_fact(runs: list[SavedRun], key: str, drop: tuple[str, ...] = ()) -> dict[str, Any] | None:
    """The runs' `engine.json[key]` when every run has the same one (less `drop`); else None."""
    found = {
        json.dumps({k: v for k, v in (run.engine.get(key) or {}).items() if k not in drop}, sort_keys=True)
        for run in runs
    }
    value = json.loads(found.pop()) if len(found) == 1 else None
    return value or None
