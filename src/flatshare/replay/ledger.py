"""The ledger of a wall-clock run: every request issued so far, its record, and the engine samples.

A request enters the ledger when it is due (`issue`), before it gets a concurrency slot, so a run cut
or interrupted while requests wait is still complete: `close_all` turns every record not yet closed
into a `failed` one that says why (a request that never went out says so, with `send_s` its due time).
The caller owns the ledger, so it can write the records even when the driver was cancelled.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from flatshare.runfiles.records import ReplayRecord
from flatshare.runfiles.samples import EngineSample
from flatshare.workloads.model import WorkloadRequest

NEVER_SENT = "never sent (waiting for a concurrency slot)"


def new_record(request: WorkloadRequest, engine: str, send_s: float) -> ReplayRecord:
    """A record for a request about to go out; `stream_request` fills in the rest."""
    return ReplayRecord(
        id=request.id,
        session_id=request.session_id,
        cls=request.cls,
        priority=request.priority,
        prompt_tokens=request.prompt_tokens,
        max_tokens=request.max_tokens,
        engine=engine,
        send_s=send_s,
        first_sentence_tokens=request.first_sentence_tokens,
    )


class Clock:
    """Seconds since the run started (`time.perf_counter`)."""

    def __init__(self) -> None:
        self.t0 = time.perf_counter()

    def start(self) -> None:
        """Make now the run's second 0."""
        self.t0 = time.perf_counter()

    def now(self) -> float:
        return time.perf_counter() - self.t0

    async def sleep_until(self, t: float) -> None:
        delay = t - self.now()
        if delay > 0:
            await asyncio.sleep(delay)


@dataclass
class RunStats:
    """What a wall-clock run saw besides the records: waits for a concurrency slot, the most requests
    in flight at once, scrape failures by endpoint (and the last one's message), requests cut at the end,
    and the events sent to a gateway's baseline and those that failed (`flatshare.replay.gatewayevents`)."""

    slot_waits: int = 0
    max_slot_wait_s: float = 0.0
    max_in_flight: int = 0
    sample_errors: dict[str, int] = field(default_factory=dict)
    last_sample_error: dict[str, str] = field(default_factory=dict)
    cut: int = 0
    events_sent: int = 0
    event_errors: int = 0

    def to_json(self) -> dict[str, Any]:
        return {**self.__dict__, "max_slot_wait_s": round(self.max_slot_wait_s, 6)}


class Ledger:
    """Records by request id, in the order issued; `samples` as `(engine, sample)` pairs."""

    def __init__(self, clock: Clock | None = None) -> None:
        self.clock = clock or Clock()
        self.records: dict[str, ReplayRecord] = {}
        self.samples: list[tuple[str, EngineSample]] = []
        self._open: set[str] = set()
        self._sent: set[str] = set()
        self._closed: Counter[str] = Counter()
        self.stats = RunStats()

    def issue(self, request: WorkloadRequest, engine: str, due_s: float) -> ReplayRecord:
        """Open a record for a request that is due now; it goes out when `sent` is called."""
        if request.id in self.records:
            raise ValueError(f"request {request.id!r} issued twice")
        record = new_record(request, engine, due_s)
        self.records[request.id] = record
        self._open.add(request.id)
        return record

    def sent(self, request_id: str) -> None:
        self._sent.add(request_id)

    def close(self, request_id: str) -> None:
        """The request's record is final (ok, failed or refused)."""
        if request_id in self._open:
            self._open.discard(request_id)
            self._closed[self.records[request_id].status] += 1

    def close_all(self, reason: str) -> int:
        """Fail every open record with `reason`; returns how many there were."""
        now = self.clock.now()
        for request_id in sorted(self._open):
            record = self.records[request_id]
            record.status = "failed"
            record.error = reason if request_id in self._sent else f"{reason}: {NEVER_SENT}"
            record.end_s = max(now, record.send_s)
        self._closed["failed"] += len(self._open)
        closed = len(self._open)
        self._open.clear()
        return closed

    @property
    def in_flight(self) -> int:
        return len(self._open & self._sent)

    def counts(self) -> Counter[str]:
        """Closed records by status, plus `open`."""
        return self._closed + Counter(open=len(self._open))

    def sorted_records(self) -> list[ReplayRecord]:
        """Records by send time, then id (the order both drivers write)."""
        return sorted(self.records.values(), key=lambda r: (r.send_s, r.id))
