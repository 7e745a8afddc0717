"""The audit log: one JSON line per routing decision, appended in batches every 0.1 s.

Fields: `t` (Unix seconds), `request_id`, `tenant`, `class`, `priority` (forwarded) and
`requested_priority` (asked for, or null), `model`, `stream`, `input_tokens` with `input_tokens_source`
(`ids`, `backend`, `local`, `estimate`), `policy`, `thresholds` (`kv_usage`, `input_tokens`; null for
policies without), `backends` (every configured backend at that moment: `name`, `kv_usage`,
`scrape_age_s` (null before any good scrape), `running`, `waiting`, `healthy`, `stale`), `candidates`
(the names the policy could choose from), `preferred`, `backend` (null when none was left), `reason`,
`attempt` (1, then 2, 3, ... when a request is re-sent after a backend failed it).
`flatshare calibrate-thresholds` reads these files back (`calibrate_inputs.samples_from_row`).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

from flatshare.errors import InputError
from flatshare.gateway.input_count import TokenCount
from flatshare.gateway.tenants import CallerGrant
from flatshare.policy.load import BackendLoad
from flatshare.policy.routing import RoutingDecision, Thresholds


def _number(value: float | None) -> float | None:
    return None if value is None or not math.isfinite(value) else round(value, 4)


def backend_fields(snap: BackendLoad) -> dict[str, Any]:
    return {
        "name": snap.name,
        "kv_usage": _number(snap.kv_usage),
        "scrape_age_s": _number(snap.scrape_age_s),
        "running": snap.running,
        "waiting": snap.waiting,
        "healthy": snap.healthy,
        "stale": snap.stale,
    }


def decision_record(
    *,
    request_id: str,
    grant: CallerGrant,
    model: str | None,
    stream: bool,
    count: TokenCount,
    policy: str,
    thresholds: Thresholds | None,
    snapshots: Sequence[BackendLoad],
    candidates: Sequence[BackendLoad],
    decision: RoutingDecision | None,
    attempt: int,
) -> dict[str, Any]:
    """One audit line (module docstring); `decision` None means no backend was left (503)."""
    return {
        "t": round(time.time(), 6),
        "request_id": request_id,
        "tenant": grant.tenant,
        "class": grant.cls,
        "priority": grant.priority,
        "requested_priority": grant.requested_priority,
        "model": model,
        "stream": stream,
        "input_tokens": count.tokens,
        "input_tokens_source": count.source,
        "policy": policy,
        "thresholds": None
        if thresholds is None
        else {"kv_usage": thresholds.kv_usage, "input_tokens": thresholds.input_tokens},
        "backends": [backend_fields(snap) for snap in snapshots],
        "candidates": [snap.name for snap in candidates],
        "preferred": decision.preferred if decision else None,
        "backend": decision.backend if decision else None,
        "reason": decision.reason if decision else "no_backend",
        "attempt": attempt,
    }


class AuditLog:
    """Appends records to a JSONL file; with no path it drops them.

    Records are kept and written (serialised then, off the request's path) in batches by `flush()`,
    which the app calls every `FLUSH_EVERY_S` and at shutdown (and `write` when `FLUSH_LINES` are
    waiting): one write per batch instead of one per request. A crash loses at most the last
    `FLUSH_EVERY_S` of lines.
    """

    FLUSH_EVERY_S = 0.1
    FLUSH_LINES = 1000

    def __init__(self, path: str | Path | None) -> None:
        """Opens `path` for appending (its folders made as needed); InputError when that fails."""
        self.path = Path(path) if path else None
        self._file: IO[str] | None = None
        self._pending: list[dict[str, Any]] = []
        if self.path is not None:
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                self._file = self.path.open("a", encoding="utf-8")
            except OSError as exc:
                raise InputError(
                    f"audit_log {self.path}: cannot append to it ({exc.strerror or exc})"
                ) from exc

    def write(self, record: dict[str, Any]) -> None:
        if self._file is not None:
            self._pending.append(record)
            if len(self._pending) >= self.FLUSH_LINES:
                self.flush()

    def flush(self) -> None:
        if self._file is not None and self._pending:
            lines = [json.dumps(record, separators=(",", ":"), allow_nan=False) for record in self._pending]
            self._file.write("\n".join(lines) + "\n")
            self._file.flush()
            self._pending.clear()

    def close(self) -> None:
        if self._file is not None:
            self.flush()
            self._file.close()
            self._file = None
