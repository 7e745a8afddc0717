"""The progress bar of `flatshare replay` (rich): seconds of the run, or requests, and status counts.

With a duration the bar counts seconds (of wall time, or of virtual time for `--sim`); without one it
counts finished requests of the workload (wall clock) or shows virtual seconds without an end (`--sim`).
`NullProgress` does nothing, for tests and scripts.
"""

from __future__ import annotations

import time
from types import TracebackType
from typing import Any

from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from flatshare.replay.ledger import Ledger


class NullProgress:
    """A progress display that shows nothing."""

    def __enter__(self) -> NullProgress:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        return None

    def wallclock(self, ledger: Ledger) -> None:
        return None

    def virtual(self, now_s: float, force: bool = False) -> None:
        return None


class ReplayProgress(NullProgress):
    """A rich progress bar over `total` units (seconds or requests; None: no end known)."""

    def __init__(self, label: str, total: float | None, unit: str, min_interval_s: float = 0.1) -> None:
        self.unit = unit
        self.by_time = unit == "s"
        self._bar = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            TextColumn("{task.completed:.0f}/{task.fields[total_text]} " + unit),
            TextColumn("{task.fields[counts]}"),
            TimeElapsedColumn(),
            refresh_per_second=2,  # drawing shares the GIL with the loop that timestamps tokens
        )
        total_text = "?" if total is None else f"{total:.0f}"
        self._task = self._bar.add_task(label, total=total, total_text=total_text, counts="")
        self._total = total
        self._min_interval_s = min_interval_s
        self._last = 0.0

    def __enter__(self) -> ReplayProgress:
        self._bar.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self._bar.stop()

    def wallclock(self, ledger: Ledger) -> None:
        counts = ledger.counts()
        done = sum(v for k, v in counts.items() if k != "open")
        text = " ".join(f"{k} {counts[k]}" for k in ("ok", "failed", "refused") if counts[k])
        self._update(ledger.clock.now() if self.by_time else done, f"{text} in flight {ledger.in_flight}")

    def virtual(self, now_s: float, force: bool = False) -> None:
        if force or time.monotonic() - self._last >= self._min_interval_s:
            self._update(now_s, "")

    def _update(self, completed: float, counts: str) -> None:
        self._last = time.monotonic()
        fields: dict[str, Any] = {"counts": counts}
        if self._total is not None:
            completed = min(completed, self._total)  # the grace period runs past --duration
        self._bar.update(self._task, completed=completed, **fields)
