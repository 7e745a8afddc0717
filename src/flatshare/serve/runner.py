"""Driving a `SimEngine` in wall-clock time on the event loop.

Virtual time is wall time since `start()` times `speed` (1: one virtual second per wall second). A
submitted request arrives at the current virtual time. The loop runs one `step()` (vLLM's scheduler,
~0.2 ms), sleeps until wall time reaches the step's `end_s`, then hands each request its new tokens
through its `RequestHandle`, so tokens appear when the simulated GPU would have produced them. A request
submitted during a step joins the next one, as in vLLM. When nothing is left the loop waits for the next
submission instead of polling. If the loop falls behind wall time, it steps without sleeping until it has
caught up, and `max_lag_s` says by how much it ran late.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import uuid
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Protocol

from flatshare.aiotasks import cancel
from flatshare.serve.abort import abort_request
from flatshare.sim.engine import SimEngine, StepReport
from flatshare.sim.requests import SimRequest

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TokenDelta:
    """New output tokens `start .. start + count - 1` of one request; the last carries the finish."""

    start: int
    count: int
    finish_reason: str | None = None
    error: str | None = None

    @property
    def final(self) -> bool:
        return self.finish_reason is not None or self.error is not None


class RequestHandle:
    """One submitted request as the HTTP layer sees it: its token deltas, in order."""

    def __init__(self, request_id: str, prompt_tokens: int, max_tokens: int) -> None:
        self.id = request_id
        self.prompt_tokens = prompt_tokens
        self.max_tokens = max_tokens
        self.produced = 0
        self.done = False
        self._queue: asyncio.Queue[TokenDelta] = asyncio.Queue()

    def push(self, count: int, finish_reason: str | None) -> None:
        self._queue.put_nowait(TokenDelta(self.produced, count, finish_reason))
        self.produced += count
        self.done = finish_reason is not None

    def fail(self, message: str) -> None:
        self._queue.put_nowait(TokenDelta(self.produced, 0, error=message))
        self.done = True

    async def deltas(self) -> AsyncIterator[TokenDelta]:
        """Deltas as the engine produces them, ending with the final one."""
        while True:
            delta = await self._queue.get()
            yield delta
            if delta.final:
                return


class StepListener(Protocol):
    """Told of every delivered step and every abort (the metrics)."""

    def on_step(self, report: StepReport, engine: SimEngine) -> None: ...

    def on_abort(self, request_id: str) -> None: ...


class WallClockRunner:
    """Owns a `SimEngine` and advances it in wall time (see the module docstring)."""

    def __init__(self, engine: SimEngine, speed: float = 1.0, listener: StepListener | None = None) -> None:
        if not speed > 0:
            raise ValueError(f"speed must be > 0, got {speed}")
        self.engine = engine
        self.speed = speed
        self.listener = listener
        self.failure: str | None = None
        self.max_lag_s = 0.0
        self._handles: dict[str, RequestHandle] = {}
        self._abort_later: set[str] = set()
        self._wakeup = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._t0 = 0.0
        self._ids = itertools.count()
        self._prefix = uuid.uuid4().hex[:8]

    async def start(self) -> None:
        self._t0 = asyncio.get_running_loop().time() - self.engine.now / self.speed
        self._task = asyncio.create_task(self._run(), name="flatshare-sim-runner")

    async def stop(self) -> None:
        task, self._task = self._task, None
        await cancel(task)

    def virtual_now(self) -> float:
        return (asyncio.get_running_loop().time() - self._t0) * self.speed

    def submit(self, prompt_token_ids: Sequence[int], max_tokens: int, priority: int = 0) -> RequestHandle:
        """Hand a request to the engine now; its tokens come through the returned handle."""
        if self.failure is not None:
            raise RuntimeError(f"the simulated engine has failed: {self.failure}")
        request_id = f"cmpl-{self._prefix}-{next(self._ids)}"
        ids = tuple(prompt_token_ids)
        self.engine.submit(SimRequest(request_id, self.virtual_now(), ids, max_tokens, priority))
        handle = RequestHandle(request_id, len(ids), max_tokens)
        self._handles[request_id] = handle
        self._wakeup.set()
        return handle

    def abort(self, handle: RequestHandle) -> None:
        """Stop an unfinished request (client gone) and free its KV blocks."""
        if handle.done or self._handles.pop(handle.id, None) is None:
            return
        handle.done = True
        if not self._try_abort(handle.id):
            self._abort_later.add(handle.id)  # still in the engine's arrival queue

    # -- the loop ----------------------------------------------------------------------------------
    async def _run(self) -> None:
        try:
            while True:
                if not self.engine.has_work():
                    self._wakeup.clear()
                    await self._wakeup.wait()
                    continue
                report = self.engine.step()
                if report is not None:
                    await self._sleep_until(report.end_s, measure=report.scheduled_tokens > 0)
                    self._deliver(report)
        except Exception as exc:
            log.exception("simulated engine failed")
            self._fail(f"{type(exc).__name__}: {exc}")

    async def _sleep_until(self, virtual_s: float, measure: bool) -> None:
        delay = virtual_s / self.speed - (asyncio.get_running_loop().time() - self._t0)
        if measure:  # an idle jump ends at an arrival already past by construction
            self.max_lag_s = max(self.max_lag_s, -delay)
        await asyncio.sleep(max(0.0, delay))

    def _deliver(self, report: StepReport) -> None:
        self._retry_aborts()
        finished = set(report.finished)
        for request_id, count in report.tokens:
            reason = self.engine.records[request_id].finish_reason if request_id in finished else None
            self._push(request_id, count, reason)
            finished.discard(request_id)
        for request_id in finished:
            self._push(request_id, 0, self.engine.records[request_id].finish_reason or "stop")
        if self.listener is not None:
            self.listener.on_step(report, self.engine)

    def _push(self, request_id: str, count: int, reason: str | None) -> None:
        handle = self._handles.get(request_id)
        if handle is None:
            return
        handle.push(count, reason)
        if reason is not None:
            del self._handles[request_id]

    def _try_abort(self, request_id: str) -> bool:
        if not abort_request(self.engine, request_id):
            return False
        if self.listener is not None:
            self.listener.on_abort(request_id)
        return True

    def _retry_aborts(self) -> None:
        for request_id in list(self._abort_later):
            admitted = request_id in self.engine.records
            if self._try_abort(request_id) or admitted:
                self._abort_later.discard(request_id)

    def _fail(self, message: str) -> None:
        self.failure = message
        for handle in self._handles.values():
            handle.fail(message)
        self._handles.clear()
