"""The wall-clock driver: a workload against OpenAI-compatible endpoints, in real time.

Each session runs as one task. Request 0 goes out at the session's `start_s` (seconds after the run
starts); request k+1 at `Session.issue_s` of when request k's reply was complete (the driver's own
observation: the finish chunk, or when a failure was seen), with the tokens that arrived and, for voice,
when its first sentence arrived: the rule the virtual driver applies to simulated times. A session stays
on one endpoint (`sticky_index`, the virtual driver's `sticky_route` rule).

Bounds: at most `max_concurrency` requests are in flight (a request due while all slots are busy waits;
its `send_s` is when it really went out, and `ledger.stats` counts the waits). No request is issued
after `duration_s`; requests still running `grace_s` later are cancelled (the client disconnects, so
vLLM aborts them) and recorded as failed. Every endpoint's `/metrics` is sampled every
`sample_interval_s` (unless `sample_metrics` is off: a gateway's /metrics has no vLLM readings), or the
`sample_from` endpoints' instead (a gateway replayed, the engine behind it sampled).

In front of a flatshare gateway's baseline (`session_headers`, and `events`: `flatshare.replay.gatewayevents`)
each request names its session, and the gate hears what the virtual-time driver tells it: `tool_returned`
just before an agent session's next request goes out, `caller_speaking` when a voice session's caller
starts speaking (when the previous reply has been spoken, i.e. the next turn's due time less its
`pause_before_s`), for turns due within `duration_s`.

Nothing issued is dropped: `run_wallclock` writes into a `Ledger` that the caller owns, and on any exit
(done, cut, cancelled as by Ctrl-C) the ledger closes every unfinished request as `failed`, with error
`interrupted` on cancellation (a request still waiting for a slot says so too).
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import httpx

from flatshare import httpclient
from flatshare.replay import body
from flatshare.replay.clients import ClientPool
from flatshare.replay.endpoints import Endpoint, sticky_index
from flatshare.replay.gatewayevents import CALLER_SPEAKING, TOOL_RETURNED, GatewayEvents
from flatshare.replay.ledger import Ledger
from flatshare.replay.sampler import Sampler
from flatshare.replay.stream import OnResponse, stream_request
from flatshare.workloads.model import Session, Workload

T = TypeVar("T")
INTERRUPTED = "interrupted"
CUT = "cut: still running at the end of the run (duration + grace)"


@dataclass(frozen=True)
class WallClockOptions:
    """How the wall-clock driver runs; validated on construction.

    `duration_s`: issue nothing after this many seconds (None: the whole workload). `grace_s`: how long
    requests may run on after `duration_s`. `read_timeout_s`: the longest silence within one response.
    `send_priority`: put the request's `priority` in the body (a vLLM server without
    `--scheduling-policy priority` refuses a non-zero one). `sample_metrics`: scrape each endpoint's
    `/metrics` (off when the caller samples the engines another way). `session_headers`: send the
    session and first-sentence headers a flatshare gateway's baseline reads (`flatshare.replay.stream`).
    """

    max_concurrency: int = 256
    duration_s: float | None = None
    grace_s: float = 30.0
    connect_timeout_s: float = 10.0
    read_timeout_s: float = 300.0
    sample_interval_s: float = 0.5
    send_priority: bool = True
    sample_metrics: bool = True
    session_headers: bool = False

    def __post_init__(self) -> None:
        if isinstance(self.max_concurrency, bool) or self.max_concurrency < 1:
            raise ValueError(f"max_concurrency must be >= 1, got {self.max_concurrency!r}")
        if self.duration_s is not None and not self.duration_s > 0:
            raise ValueError(f"duration_s must be > 0 (or None), got {self.duration_s!r}")
        if not self.grace_s >= 0:
            raise ValueError(f"grace_s must be >= 0, got {self.grace_s!r}")
        for name in ("connect_timeout_s", "read_timeout_s", "sample_interval_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)!r}")


Progress = Callable[[Ledger], None]


class _Driver:
    def __init__(
        self,
        workload: Workload,
        endpoints: Sequence[Endpoint],
        options: WallClockOptions,
        ledger: Ledger,
        clients: ClientPool,
        on_progress: Progress | None,
        on_response: OnResponse | None = None,
        events: tuple[GatewayEvents, httpx.AsyncClient] | None = None,
    ) -> None:
        self.on_response = on_response
        self.events = events
        self.workload = workload
        self.endpoints = endpoints
        self.options = options
        self.ledger = ledger
        self.clients = clients
        self.on_progress = on_progress
        self.slots = asyncio.Semaphore(options.max_concurrency)
        self.stats = ledger.stats
        self.in_flight = 0

    async def session(self, session: Session) -> None:
        endpoint = self.endpoints[sticky_index(session.id, len(self.endpoints))]
        until = self.options.duration_s
        due = session.issue_s(0)
        for k, request in enumerate(session.requests):
            if until is not None and due > until:
                return
            await self.ledger.clock.sleep_until(due)
            if k > 0 and session.speech_tokens_per_s is None:
                await self._event(TOOL_RETURNED, session.id)
            record = self.ledger.issue(request, endpoint.name, due)
            queued = self.ledger.clock.now()
            async with self.slots, self.clients.lend(endpoint.url) as client:
                self._sent(request.id, queued)
                try:
                    await stream_request(
                        client,
                        endpoint,
                        request,
                        record,
                        self.ledger.clock,
                        self.options.send_priority,
                        self.on_response,
                        self.options.session_headers,
                    )
                finally:
                    self.in_flight -= 1
            self.ledger.close(request.id)
            if self.on_progress is not None:
                self.on_progress(self.ledger)
            if k + 1 < len(session.requests):
                assert record.end_s is not None
                n = len(record.token_times_s)
                due = session.issue_s(k + 1, record.end_s, n, record.first_sentence_s)
                if session.speech_tokens_per_s is not None and (until is None or due <= until):
                    await self.ledger.clock.sleep_until(due - session.requests[k + 1].pause_before_s)
                    await self._event(CALLER_SPEAKING, session.id)

    async def _event(self, kind: str, session_id: str) -> None:
        if self.events is not None:
            events, client = self.events
            await events.post(client, kind, session_id, self.stats)

    def _sent(self, request_id: str, queued: float) -> None:
        self.ledger.sent(request_id)
        wait = self.ledger.clock.now() - queued
        if wait > 0.001:
            self.stats.slot_waits += 1
            self.stats.max_slot_wait_s = max(self.stats.max_slot_wait_s, wait)
        self.in_flight += 1
        self.stats.max_in_flight = max(self.stats.max_in_flight, self.in_flight)

    async def run(self) -> None:
        tasks = [asyncio.create_task(self.session(s), name=f"session {s.id}") for s in self.workload.sessions]
        try:
            deadline = None
            if self.options.duration_s is not None:
                deadline = self.options.duration_s + self.options.grace_s - self.ledger.clock.now()
            _, pending = await asyncio.wait(tasks, timeout=deadline) if tasks else (set(), set())
            if pending:
                self.stats.cut = self.ledger.close_all(CUT)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        for task in tasks:
            if not task.cancelled() and task.exception() is not None:
                raise task.exception()  # type: ignore[misc]  # a bug in the driver, not a failed request


async def run_wallclock(
    workload: Workload,
    endpoints: Sequence[Endpoint],
    ledger: Ledger,
    options: WallClockOptions | None = None,
    on_progress: Progress | None = None,
    transport: httpx.AsyncBaseTransport | None = None,
    on_response: OnResponse | None = None,
    events: GatewayEvents | None = None,
    sample_from: Sequence[Endpoint] | None = None,
) -> None:
    """Replay `workload` against `endpoints` in wall time, recording into `ledger` (see the module
    docstring). `ledger.clock` is the run's clock; samples go to `ledger.samples`, counters to
    `ledger.stats`. `transport` replaces the network (tests). `on_response(request_id, headers)` sees
    each answer's headers as they arrive. `events`: a gateway's baseline to tell of callers speaking and
    tools returning; `sample_from`: the endpoints whose `/metrics` are sampled (default: `endpoints`)."""
    if not endpoints:
        raise ValueError("run_wallclock needs at least one endpoint")
    options = options or WallClockOptions()
    timeout = httpx.Timeout(options.read_timeout_s, connect=options.connect_timeout_s, pool=None)
    probe_timeout = httpx.Timeout(max(2.0, options.sample_interval_s * 4), connect=2.0)
    clients = ClientPool(timeout, transport)
    body.warm({request.vocab_size for request in workload.requests()})
    async with httpclient.async_client(probe_timeout, verify=clients.ssl, transport=transport) as probe:
        if not ledger.records:
            ledger.clock.start()  # second 0 is when the sessions start, after the set-up
        told = (events, probe) if events is not None else None
        driver = _Driver(workload, endpoints, options, ledger, clients, on_progress, on_response, told)
        sampled = (endpoints if sample_from is None else sample_from) if options.sample_metrics else []
        samplers = [Sampler(probe, e.url, ledger.clock.now, options.sample_interval_s) for e in sampled]
        sampling = [asyncio.create_task(s.run(), name=f"metrics {s.url}") for s in samplers]
        try:
            await driver.run()
        finally:
            ledger.close_all(INTERRUPTED)
            for task in sampling:
                task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.gather(*sampling, return_exceptions=True)
            for endpoint, sampler in zip(sampled, samplers, strict=True):
                ledger.samples.extend((endpoint.name, s) for s in sampler.samples)
                ledger.stats.sample_errors[endpoint.name] = sampler.errors
                if sampler.last_error:
                    ledger.stats.last_sample_error[endpoint.name] = sampler.last_error
            await clients.aclose()


def run_in_loop(main: Coroutine[Any, Any, T]) -> T:
    """`asyncio.run(main)` on uvloop when it is installed (about 15% less CPU per streamed token here),
    else on asyncio's own loop. Ctrl-C (SIGINT) cancels `main` through the loop's own signal handling
    (`loop.add_signal_handler`), then raises KeyboardInterrupt, as asyncio.run does."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(_interruptible(main))
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(_interruptible(main))


async def _interruptible(main: Coroutine[Any, Any, T]) -> T:
    """Await `main` in a task that SIGINT cancels. asyncio.Runner's own SIGINT handler is a Python-level
    signal handler, and in two of three CI runs on a loaded machine a replay did not stop on SIGINT
    (tests/replay/test_replay_servesim.py); the loop's own signal handling (which wakes the loop) takes
    SIGINT over while `main` runs. Where the loop cannot take signals (not the main thread), `main` runs
    as it is."""
    loop = asyncio.get_running_loop()
    task = asyncio.ensure_future(main)
    interrupted = False

    def on_sigint() -> None:
        nonlocal interrupted
        interrupted = True
        task.cancel()

    try:
        loop.add_signal_handler(signal.SIGINT, on_sigint)
    except (NotImplementedError, RuntimeError, ValueError):
        return await task
    try:
        return await task
    except asyncio.CancelledError:
        if interrupted:
            raise KeyboardInterrupt from None
        raise
    finally:
        loop.remove_signal_handler(signal.SIGINT)
