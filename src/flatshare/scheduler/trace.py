"""make-room's opt-in per-step trace: one JSON line per step in which it acted or held."""

from __future__ import annotations

import json
from typing import Any

from flatshare.scheduler.config import MakeRoomConfigError


class StepTrace:
    """Appends to `path` (None: no trace). The file is opened once when the scheduler is built, so an
    unwritable path fails at start-up, naming the setting, not in the middle of a step."""

    def __init__(self, path: str | None) -> None:
        self._file = None
        if path is None:
            return
        try:
            self._file = open(path, "a", encoding="utf-8")  # noqa: SIM115 (kept open for the run)
        except OSError as exc:
            raise MakeRoomConfigError(f"make_room.trace_path {path!r} is not writable: {exc}") from exc

    def write(self, step: int, record: dict[str, Any]) -> None:
        if self._file is None or not record:
            return
        self._file.write(json.dumps({"step": step, **record}, sort_keys=True) + "\n")
        self._file.flush()
