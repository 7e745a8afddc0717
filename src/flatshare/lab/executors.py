"""Where an experiment's jobs run: local processes or a Ray cluster, behind one interface.

`Executor.run(jobs, fn, on_done, then)` runs `fn(job)` for every job and returns the failures (empty
when all succeeded). It never stops early: a job that raises is reported as a `JobFailure` (condition,
seed, error) and the others complete. `on_done(job, failure_or_None)` is called in the calling process
after each job, in completion order (progress bars); `then(job, result)` may return follow-up jobs,
submitted at once (a calibration run releasing the runs that need it).

`fn` and the jobs are pickled to the workers, so `fn` must be a module-level function (or a
`functools.partial` of one) and every job picklable. A job's files must depend only on the job, never on
which worker ran it or when: then every executor writes the same bytes. Paths inside jobs should be
absolute (workers may start elsewhere); on a Ray cluster of several machines they must lie on a
filesystem every node sees.
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.connection
import os
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Any, Protocol

from flatshare.errors import InputError
from flatshare.lab.drive import OnDone, Then, drive
from flatshare.lab.jobs import Job, JobFailure

EXECUTORS = ("local", "ray")


class Executor(Protocol):
    @property
    def name(self) -> str:
        """`local` or `ray`."""
        ...

    def run(
        self,
        jobs: Sequence[Job[Any]],
        fn: Callable[[Job[Any]], Any],
        on_done: OnDone | None = None,
        then: Then | None = None,
    ) -> list[JobFailure]:
        """Run every job (and follow-ups) to completion; return the failures (see the module doc)."""
        ...


class _FuturePool:
    """Handles are `concurrent.futures` futures; a job's exception is reported as raised."""

    def result(self, handle: Any) -> Any:
        return handle.result()

    def error(self, exc: BaseException) -> BaseException:
        return exc


class _SerialPool(_FuturePool):
    """Runs each job in this process, one at a time, in submission order (when waited for)."""

    def __init__(self) -> None:
        self._queue: list[tuple[Future[Any], Callable[[Job[Any]], Any], Job[Any]]] = []

    def submit(self, fn: Callable[[Job[Any]], Any], job: Job[Any]) -> Future[Any]:
        future: Future[Any] = Future()
        self._queue.append((future, fn, job))
        return future

    def wait_any(self, handles: list[Any]) -> list[Any]:
        future, fn, job = self._queue.pop(0)
        try:
            future.set_result(fn(job))
        except Exception as exc:
            future.set_exception(exc)
        return [future]


class _ProcessPool(_FuturePool):
    def __init__(self, pool: ProcessPoolExecutor) -> None:
        self._pool = pool

    def submit(self, fn: Callable[[Job[Any]], Any], job: Job[Any]) -> Future[Any]:
        return self._pool.submit(fn, job)

    def wait_any(self, handles: list[Any]) -> list[Any]:
        done, _ = wait(handles, return_when=FIRST_COMPLETED)
        return [h for h in handles if h in done]  # submission order among those done


def _exit_with_parent() -> None:
    """A local worker's initializer: end the worker when the process that started the pool is gone.

    A `ProcessPoolExecutor` worker outlives a parent killed by a signal it does not handle (SIGTERM from a
    job scheduler or `kill`): it went on with the jobs already queued to it, then waited for more for
    ever. A daemon thread waits on multiprocessing's parent sentinel (a pipe the parent holds open, at its
    end when the parent exits, under every start method) and exits the worker at once, whatever job it is
    running. Not the parent pid: under forkserver a worker's parent is the forkserver, which lives as long
    as any worker does."""
    parent = multiprocessing.parent_process()
    if parent is None:  # not started by multiprocessing: nothing to watch
        return

    def watch() -> None:
        multiprocessing.connection.wait([parent.sentinel])
        os._exit(1)

    threading.Thread(target=watch, name="flatshare-parent-watch", daemon=True).start()


def default_workers() -> int:
    """One process per core, at most 2 (the machines this was built on have 2)."""
    return max(1, min(2, os.cpu_count() or 1))


@dataclass(frozen=True)
class LocalExecutor:
    """Jobs in `workers` local processes (1: in this process, one after another)."""

    workers: int = field(default_factory=default_workers)
    name: str = "local"

    def __post_init__(self) -> None:
        if self.workers < 1:
            raise ValueError(f"local executor: workers must be >= 1, got {self.workers}")

    def run(
        self,
        jobs: Sequence[Job[Any]],
        fn: Callable[[Job[Any]], Any],
        on_done: OnDone | None = None,
        then: Then | None = None,
    ) -> list[JobFailure]:
        if self.workers == 1:
            return drive(_SerialPool(), jobs, fn, on_done, then)
        with ProcessPoolExecutor(max_workers=self.workers, initializer=_exit_with_parent) as pool:
            return drive(_ProcessPool(pool), jobs, fn, on_done, then)


def make_executor(
    name: str, workers: int = 0, ray_address: str | None = None, resources: dict[str, float] | None = None
) -> Executor:
    """The executor a command's `--executor`, `--workers` and `--ray-address` name; InputError when
    they do not fit (Ray asked for but not installed: the extra to install is named). `resources`: what
    each job asks of a Ray cluster (`num_cpus`, `num_gpus`; None: one CPU)."""
    if name == "local":
        if ray_address is not None:
            raise InputError("--ray-address: only with --executor ray")
        return LocalExecutor(workers) if workers else LocalExecutor()
    if name == "ray":
        if workers:
            raise InputError("--workers: with --executor ray the cluster's CPUs set the parallelism")
        from flatshare.lab.ray_executor import RayExecutor, require_ray

        require_ray()
        return RayExecutor(ray_address, resources=dict(resources or {}))
    raise InputError(f"--executor must be one of {', '.join(EXECUTORS)}, got {name!r}")
