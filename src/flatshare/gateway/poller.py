"""One poller per backend: every `poll.interval_s`, GET /metrics and /health (together, each bounded
by `poll.timeout_s`), and GET /v1/models when the backend comes (back) up and every `MODELS_EVERY` polls.

A poll is good when both answer 200 and the metrics page has vLLM's KV-use gauge. Ticks are at fixed
times (`start + k * interval`); a poll that overruns skips the ticks it missed instead of bunching up.
Results go into the backend's `BackendState` (health rules there). The poller owns the state's health
hook: every flip is logged (a warning when the backend turns unhealthy) and passed to `on_health`,
also when the proxy recorded the failure that caused it.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable

from flatshare.aiotasks import cancel
from flatshare.gateway.backends import BackendState
from flatshare.gateway.scrape import ScrapeError, parse_metrics
from flatshare.gateway.upstream import Upstream, UpstreamError
from flatshare.protocol.models import PATH as MODELS_PATH
from flatshare.protocol.models import model_cards

log = logging.getLogger(__name__)
MODELS_EVERY = 100


class Poller:
    """Keeps one `BackendState` up to date from its server."""

    def __init__(
        self,
        state: BackendState,
        client: Upstream,
        clock: Callable[[], float] = time.monotonic,
        on_health: Callable[[BackendState, bool], None] | None = None,
    ) -> None:
        self.state = state
        self.client = client
        self.clock = clock
        self.on_health = on_health
        """Called with the state and its new health whenever it flips (membership records it)."""
        state.on_health = self._flipped
        self.polls = 0
        self._since_models = MODELS_EVERY
        self._task: asyncio.Task[None] | None = None

    async def poll_once(self) -> bool:
        """One poll; True when it was good."""
        state, url = self.state, self.state.config.url
        was_healthy = state.healthy
        self.polls += 1
        timeout = state.poll.timeout_s
        try:
            page, health = await asyncio.gather(
                self.client.fetch(f"{url}/metrics", timeout), self.client.fetch(f"{url}/health", timeout)
            )
            metrics = parse_metrics(_body(page, "/metrics").decode())
            _body(health, "/health")
            self._since_models += 1
            if not was_healthy or not state.models or self._since_models >= MODELS_EVERY:
                await self._fetch_models()
        except UpstreamError as exc:
            state.record_failure(f"cannot reach it: {exc}", refused=exc.refused)
            return False
        except (ScrapeError, ValueError) as exc:
            state.record_failure(f"{type(exc).__name__}: {exc}")
            return False
        state.record_scrape(metrics, self.clock())
        return True

    async def _fetch_models(self) -> None:
        answer = await self.client.fetch(f"{self.state.config.url}{MODELS_PATH}", self.state.poll.timeout_s)
        self.state.set_models(model_cards(json.loads(_body(answer, MODELS_PATH))))
        self._since_models = 0

    def _flipped(self, state: BackendState, error: str) -> None:
        """The state's health hook (module docstring)."""
        if state.healthy:
            log.info("backend %s is healthy (models: %s)", state.name, ", ".join(sorted(state.models)))
        else:
            log.warning("backend %s is unhealthy: %s", state.name, error)
        if self.on_health is not None:
            self.on_health(state, state.healthy)

    async def run(self) -> None:
        """Poll at fixed ticks until cancelled."""
        interval = self.state.poll.interval_s
        start = self.clock()
        tick = 0
        while True:
            await self.poll_once()
            elapsed = self.clock() - start
            tick = max(tick + 1, int(elapsed / interval) + 1)
            await asyncio.sleep(max(0.0, start + tick * interval - self.clock()))

    def start(self) -> None:
        self._task = asyncio.create_task(self.run(), name=f"poll-{self.state.name}")

    async def stop(self) -> None:
        task, self._task = self._task, None
        await cancel(task)


def _body(answer: tuple[int, bytes], what: str) -> bytes:
    status, body = answer
    if status != 200:
        raise ValueError(f"{what} answered {status}")
    return body
