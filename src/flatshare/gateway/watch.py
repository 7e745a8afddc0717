"""Background tasks that cannot die silently: every exception they catch is counted and logged once, and
a task that ends anyway is flagged.

The gateway's long-running tasks (a poller per backend, a DNS discovery per name) read what other
servers send, so anything may go wrong on any round. Each round catches every `Exception` and tells
`TaskWatch.caught`; the watch counts it by task and exception type and says whether to log it (once per
kind of error until the task's next good round, `ok`), so a backend answering garbage ten times a
second costs one log line, not ten a second. A task started with `TaskWatch.start` that ends other than
by cancellation (a bug outside its rounds) is marked down, logged as an error, and its `on_death` hook
runs (the poller marks its backend unhealthy: nothing will read it again).

Metrics (read at scrape time): `flatshare_gateway_task_up{task}` (1 while the task runs, 0 once it
died; tasks stopped on purpose leave) and `flatshare_gateway_task_errors_total{task, error}`
(exceptions caught and survived, by exception type).
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Callable, Coroutine, Iterator
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

log = logging.getLogger(__name__)


class TaskWatch:
    """The health of the gateway's background tasks (module docstring)."""

    def __init__(self) -> None:
        self.errors: Counter[tuple[str, str]] = Counter()
        self.up: dict[str, bool] = {}
        self._logged: dict[str, set[str]] = {}

    def caught(self, task: str, exc: BaseException) -> bool:
        """Count an exception `task` survived; True when it is the first of its type since the task's
        last good round (the caller logs it then, and only then)."""
        kind = type(exc).__name__
        self.errors[task, kind] += 1
        seen = self._logged.setdefault(task, set())
        first = kind not in seen
        seen.add(kind)
        return first

    def ok(self, task: str) -> None:
        """A good round: the next error of any kind is logged again."""
        self._logged.pop(task, None)

    def start(
        self,
        name: str,
        work: Coroutine[Any, Any, None],
        on_death: Callable[[BaseException], None] | None = None,
    ) -> asyncio.Task[None]:
        """Run `work` as task `name`, watched: ending with an exception marks it down (module docstring)."""
        task = asyncio.create_task(work, name=name)
        self.up[name] = True
        task.add_done_callback(lambda done: self._ended(name, done, on_death))
        return task

    def forget(self, name: str) -> None:
        """A task stopped on purpose (a removed backend's poller): its series leave the page."""
        self.up.pop(name, None)
        self._logged.pop(name, None)
        for key in [key for key in self.errors if key[0] == name]:
            del self.errors[key]

    def _ended(
        self, name: str, task: asyncio.Task[None], on_death: Callable[[BaseException], None] | None
    ) -> None:
        if task.cancelled():
            return
        exc = task.exception()
        if exc is None:
            return
        self.up[name] = False
        self.errors[name, type(exc).__name__] += 1
        log.error("background task %s died: %s: %s", name, type(exc).__name__, exc)
        if on_death is not None:
            on_death(exc)

    def collector(self) -> Collector:
        return _WatchCollector(self)


class _WatchCollector(Collector):
    def __init__(self, watch: TaskWatch) -> None:
        self.watch = watch

    def collect(self) -> Iterator[Metric]:
        up = GaugeMetricFamily(
            "flatshare_gateway_task_up",
            "1 while a background task (poller, discovery) runs; 0 once it died.",
            labels=["task"],
        )
        for name, alive in sorted(self.watch.up.items()):
            up.add_metric([name], float(alive))
        yield up
        errors = CounterMetricFamily(
            "flatshare_gateway_task_errors",
            "Exceptions a background task caught and survived (or died of), by exception type.",
            labels=["task", "error"],
        )
        for (name, kind), count in sorted(self.watch.errors.items()):
            errors.add_metric([name, kind], float(count))
        yield errors
