"""The scheduling loop every executor shares (`drive`) and the pool interface it drives (`Pool`): the
local executors (`flatshare.lab.executors`) and the Ray one (`flatshare.lab.ray_executor`) differ only in
their pool."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

from flatshare.lab.jobs import Job, JobFailure, failure

OnDone = Callable[[Job[Any], JobFailure | None], None]
Then = Callable[[Job[Any], Any], Sequence[Job[Any]]]


class Pool(Protocol):
    """Where jobs run: handles for submitted jobs, waited for any, their results, and a failed job's own
    exception (a pool may wrap it)."""

    def submit(self, fn: Callable[[Job[Any]], Any], job: Job[Any]) -> Any: ...

    def wait_any(self, handles: list[Any]) -> list[Any]: ...

    def result(self, handle: Any) -> Any: ...

    def error(self, exc: BaseException) -> BaseException: ...


def drive(
    pool: Pool,
    jobs: Sequence[Job[Any]],
    fn: Callable[[Job[Any]], Any],
    on_done: OnDone | None,
    then: Then | None,
) -> list[JobFailure]:
    """The one scheduling loop every executor shares: submit, wait for any, report, submit follow-ups;
    returns the failures (`flatshare.lab.executors`' module doc says the contract)."""
    pending: dict[Any, Job[Any]] = {}
    failures: list[JobFailure] = []

    def report(job: Job[Any], exc: BaseException | None) -> None:
        failed = None if exc is None else failure(job, pool.error(exc))
        if failed is not None:
            failures.append(failed)
        if on_done is not None:
            on_done(job, failed)

    def submit(job: Job[Any]) -> None:
        try:
            pending[pool.submit(fn, job)] = job
        except Exception as exc:  # a broken pool: the job could not even start
            report(job, exc)

    for job in jobs:
        submit(job)
    while pending:
        for handle in pool.wait_any(list(pending)):
            job = pending.pop(handle)
            try:
                result = pool.result(handle)
                follow = then(job, result) if then is not None else ()
            except Exception as exc:
                report(job, exc)
                continue
            for next_job in follow:
                submit(next_job)
            report(job, None)
    return failures
