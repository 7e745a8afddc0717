"""The real gateway's edge for a gateway-side baseline (`flatshare.policy.gates`): it keeps the
gate's clock and loads, parks each gated request until the gate sends it, and signals aborts.

One `GateKeeper` per gateway, on its event loop (no locks). The gate is polled on every call that can
change its mind (an arrival, a first token, an end, an abort done, an event from outside) and every
`TICK_S` seconds (its wake-ups, and new scrapes of the backends). Its loads are the pollers' last
readings: KV use, waiting and running requests, the reading's age, and `unseen` = requests this gateway
sent to the backend after that reading was taken.

Requests are known to the gate by the gateway's arrival number (`g<sequence>`), so two clients reusing
an `x-request-id` cannot collide. What the proxy does with a decision (proxy.py): a send resolves the
request's wait with the `max_tokens` to send; an abort sets the request's abort signal, and the proxy,
still waiting for the request's first stream chunk, closes the upstream stream (vLLM aborts a request
whose client disconnects) and reports `aborted`, or, if the chunk came first, `first_token` (too late).
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections import defaultdict
from collections.abc import Callable

from flatshare.aiotasks import cancel
from flatshare.gateway.backends import BackendPool
from flatshare.policy.gates.core import Gate, GateEvent, GateRequest
from flatshare.policy.load import BackendLoad

TICK_S = 0.02
"""Seconds between polls with nothing else happening (wake-ups and new scrapes are seen this late)."""


class GateKeeper:
    """Drives one `Gate` for the gateway (module docstring)."""

    def __init__(self, gate: Gate, pool: BackendPool, clock: Callable[[], float] = time.monotonic) -> None:
        self.gate = gate
        self.pool = pool
        self.clock = clock
        self._waiting: dict[str, asyncio.Future[int | None]] = {}
        self._abort: dict[str, asyncio.Event] = {}
        self._sent: dict[str, list[float]] = defaultdict(list)
        self._task: asyncio.Task[None] | None = None

    @property
    def name(self) -> str:
        return self.gate.name

    # -- lifecycle ---------------------------------------------------------------------------------------
    def start(self) -> None:
        self._task = asyncio.create_task(self._tick(), name="baseline-gate")

    async def stop(self) -> None:
        task, self._task = self._task, None
        await cancel(task)

    async def _tick(self) -> None:
        while True:
            await asyncio.sleep(TICK_S)
            self.poll()

    # -- the proxy's calls -------------------------------------------------------------------------------
    async def admit(self, request: GateRequest) -> int | None:
        """Wait until the gate sends `request`; the `max_tokens` to send it with (None: the client's).
        The caller must call `finished` however the request ends (cancelled included)."""
        self._abort[request.id] = asyncio.Event()
        future = self._park(request.id)
        self.gate.arrive(request, self.clock())
        self.poll()
        return await future

    async def resubmit(self, request_id: str) -> int | None:
        """After `aborted`: wait until the gate sends the request again."""
        future = self._park(request_id)
        self.poll()
        return await future

    def abort_signal(self, request_id: str) -> asyncio.Event:
        return self._abort[request_id]

    def first_token(self, request_id: str) -> None:
        self.gate.first_token(request_id, self.clock())
        self.poll()

    def progress(self, request_id: str, tokens: int) -> None:
        self.gate.progress(request_id, tokens, self.clock())
        self.poll()

    def aborted(self, request_id: str) -> None:
        self._abort[request_id].clear()
        self.gate.aborted(request_id, self.clock())
        self.poll()

    def finished(self, request_id: str) -> None:
        future = self._waiting.pop(request_id, None)
        if future is not None:
            future.cancel()
        self._abort.pop(request_id, None)
        self.gate.finished(request_id, self.clock())
        self.poll()

    def event(self, event: GateEvent) -> None:
        self.gate.event(event, self.clock())
        self.poll()

    # -- deciding ----------------------------------------------------------------------------------------
    def poll(self) -> None:
        now = self.clock()
        decisions = self.gate.poll(now, self._loads(now))
        for send in decisions.send:
            future = self._waiting.pop(send.request_id, None)
            if future is not None and not future.done():
                future.set_result(send.max_tokens)
            backend = self.gate.requests[send.request_id].request.backend
            self._sent[backend].append(now)
        for request_id in decisions.abort:
            self._abort[request_id].set()

    def _park(self, request_id: str) -> asyncio.Future[int | None]:
        future: asyncio.Future[int | None] = asyncio.get_running_loop().create_future()
        self._waiting[request_id] = future
        return future

    def _loads(self, now: float) -> dict[str, BackendLoad]:
        loads = {}
        for state in self.pool.states:
            sent = self._sent[state.name]
            sent[:] = [t for t in sent if t > state.last_good_s]
            loads[state.name] = dataclasses.replace(state.snapshot(now), unseen=len(sent))
        return loads

    def held(self) -> int:
        return len(self.gate.held())
