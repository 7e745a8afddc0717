"""One poller per backend: every `poll.interval_s`, GET /metrics and /health (together, each bounded
by `poll.timeout_s`), and GET /v1/models when the backend comes (back) up and every `MODELS_EVERY` polls.

A poll is good when both answer 200 and the metrics page has vLLM's KV-use gauge, every value the
router reads finite (`flatshare.protocol.prometheus.parse_load`). Ticks are at fixed times (`start + k * interval`); a poll that
overruns skips the ticks it missed instead of bunching up. Results go into the backend's `BackendState`
(health rules there). The poller owns the state's health hook: every flip is logged (a warning when the
backend turns unhealthy) and passed to `on_health`, also when the proxy recorded the failure that caused it.
The first poll's outcome is logged too, healthy or not: a backend unreachable from the start is one
warning, not silence (it never flips, as it was never healthy); then one line per change, never one per poll.

A backend is read, not trusted: whatever its answers raise (a page too large, non-finite numbers,
JSON nested 100,000 deep, a bug in a parser) is a failed poll, counted in the `TaskWatch` and logged once
per kind until the next good poll, and the poller goes on; the next good answer makes the backend
healthy again. Every answer is read up to `backend_limits.max_metrics_bytes` only, and a page over
`PARSE_INLINE_BYTES` is parsed in a worker thread so the event loop keeps serving. Should the loop
itself end on an exception anyway, the watch marks the task down and the backend turns unhealthy
(`BackendState.poller_died`): never "healthy, stale" forever.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from flatshare import jsonin
from flatshare.aiotasks import cancel
from flatshare.gateway.backendlimits import PARSE_INLINE_BYTES
from flatshare.gateway.backends import BackendState
from flatshare.gateway.upstream import Upstream, UpstreamError
from flatshare.gateway.watch import TaskWatch
from flatshare.policy.load import BackendLoad
from flatshare.protocol.models import PATH as MODELS_PATH
from flatshare.protocol.models import model_cards
from flatshare.protocol.prometheus import parse_load

log = logging.getLogger(__name__)
MODELS_EVERY = 100
MAX_ERROR_CHARS = 300


class Poller:
    """Keeps one `BackendState` up to date from its server."""

    def __init__(
        self,
        state: BackendState,
        client: Upstream,
        clock: Callable[[], float] = time.monotonic,
        on_health: Callable[[BackendState, bool], None] | None = None,
        watch: TaskWatch | None = None,
    ) -> None:
        self.state = state
        self.client = client
        self.clock = clock
        self.on_health = on_health
        """Called with the state and its new health whenever it flips (membership records it)."""
        self.watch = watch if watch is not None else TaskWatch()
        state.on_health = self._flipped
        self.polls = 0
        self._logged: bool | None = None
        """The health the log last stated (None: nothing logged yet)."""
        self._since_models = MODELS_EVERY
        self._task: asyncio.Task[None] | None = None

    @property
    def task_name(self) -> str:
        return f"poll-{self.state.name}"

    async def poll_once(self) -> bool:
        """One poll; True when it was good. Never raises but for cancellation (module docstring)."""
        good = await self._poll()
        self._log_health(self.state.last_error)
        return good

    async def _poll(self) -> bool:
        state = self.state
        self.polls += 1
        try:
            metrics = await self._read()
        except UpstreamError as exc:
            self.watch.caught(self.task_name, exc)
            state.record_failure(_short(f"cannot reach it: {exc}"), refused=exc.refused)
            return False
        except Exception as exc:  # anything a backend's answer can raise: a failed poll (module docstring)
            if self.watch.caught(self.task_name, exc):
                log.warning(
                    "backend %s: poll failed: %s (logged once until a good poll; counted in "
                    "flatshare_gateway_task_errors_total)",
                    state.name,
                    _short(f"{type(exc).__name__}: {exc}"),
                )
            state.record_failure(_short(f"{type(exc).__name__}: {exc}"))
            return False
        state.record_scrape(metrics, self.clock())
        self.watch.ok(self.task_name)
        return True

    async def _read(self) -> BackendLoad:
        state, url = self.state, self.state.config.url
        was_healthy = state.healthy
        timeout, limit = state.poll.timeout_s, state.limits.max_metrics_bytes
        page, health = await asyncio.gather(
            self.client.fetch(f"{url}/metrics", timeout, max_bytes=limit),
            self.client.fetch(f"{url}/health", timeout, max_bytes=limit),
        )
        body = _body(page, "/metrics")
        _body(health, "/health")
        if len(body) > PARSE_INLINE_BYTES:
            metrics = await asyncio.to_thread(_parse, body, state.name)
        else:
            metrics = _parse(body, state.name)
        self._since_models += 1
        if not was_healthy or not state.models or self._since_models >= MODELS_EVERY:
            await self._fetch_models()
        return metrics

    async def _fetch_models(self) -> None:
        state = self.state
        answer = await self.client.fetch(
            f"{state.config.url}{MODELS_PATH}", state.poll.timeout_s, max_bytes=state.limits.max_metrics_bytes
        )
        state.set_models(model_cards(jsonin.loads(_body(answer, MODELS_PATH), MODELS_PATH)))
        self._since_models = 0

    def _flipped(self, state: BackendState, error: str) -> None:
        """The state's health hook (module docstring)."""
        self._log_health(error)
        if self.on_health is not None:
            self.on_health(state, state.healthy)

    def _log_health(self, error: str) -> None:
        """Log the backend's health when it differs from what the log last said (module docstring)."""
        state = self.state
        if state.healthy == self._logged:
            return
        self._logged = state.healthy
        if state.healthy:
            log.info("backend %s is healthy (models: %s)", state.name, ", ".join(sorted(state.models)))
        else:
            log.warning("backend %s is unhealthy: %s", state.name, error)

    async def run(self) -> None:
        """Poll at fixed ticks until cancelled; a round that raises (a bug past `poll_once`'s own
        guard, e.g. in a health hook) is counted and logged once, and the next tick comes as planned."""
        interval = self.state.poll.interval_s
        start = self.clock()
        tick = 0
        self.state.poller = "running"
        while True:
            try:
                await self.poll_once()
            except Exception as exc:
                if self.watch.caught(self.task_name, exc):
                    log.error(
                        "backend %s: poll round failed: %s: %s", self.state.name, type(exc).__name__, exc
                    )
            elapsed = self.clock() - start
            tick = max(tick + 1, int(elapsed / interval) + 1)
            await asyncio.sleep(max(0.0, start + tick * interval - self.clock()))

    def start(self) -> None:
        self._task = self.watch.start(self.task_name, self.run(), self._died)

    def _died(self, exc: BaseException) -> None:
        self.state.poller_died(_short(f"{type(exc).__name__}: {exc}"))

    async def stop(self) -> None:
        task, self._task = self._task, None
        await cancel(task)
        self.watch.forget(self.task_name)
        self.state.poller = "stopped"


def _parse(body: bytes, name: str) -> BackendLoad:
    return parse_load(body.decode(), name)


def _body(answer: tuple[int, bytes], what: str) -> bytes:
    status, body = answer
    if status != 200:
        raise ValueError(f"{what} answered {status}")
    return body


def _short(text: str) -> str:
    """An error message fit for a log line and /gateway/backends (a backend's text can be long)."""
    return text if len(text) <= MAX_ERROR_CHARS else text[:MAX_ERROR_CHARS] + "..."
