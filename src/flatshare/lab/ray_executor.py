"""The `ray` executor: each job a `ray.remote` task on a Ray cluster, asking for one CPU, or for the
resources the executor was given (`num_gpus: 1` for a run on a real GPU engine: Ray then runs as many at
once as the cluster has GPUs, and sets each task's CUDA_VISIBLE_DEVICES to its own).

The cluster is the one at `address`, else at `RAY_ADDRESS`; with neither, `ray.init()` starts a local
instance for the run and shuts it down after. If Ray is already initialised in this process (a test, a
notebook) that connection is used and left open. Workers' output is not forwarded to this terminal
(vLLM's start-up chatter); it stays in the cluster's logs. Ray is an optional extra (`.[ray]`).
"""

from __future__ import annotations

import importlib.util
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from flatshare.errors import InputError
from flatshare.lab.drive import OnDone, Then, drive
from flatshare.lab.jobs import Job, JobFailure

RAY_EXTRA = "pip install -e '.[ray]'"


def require_ray() -> None:
    """InputError naming the extra to install when Ray is not importable."""
    if importlib.util.find_spec("ray") is None:
        raise InputError(f"--executor ray: Ray is not installed; install the extra: {RAY_EXTRA}")


def _call(fn: Callable[[Job[Any]], Any], job: Job[Any]) -> Any:
    return fn(job)


class _RayPool:
    def __init__(self, ray: Any, resources: dict[str, float]) -> None:
        self._ray = ray
        self._task = ray.remote(**({"num_cpus": 1} | resources))(_call)

    def submit(self, fn: Callable[[Job[Any]], Any], job: Job[Any]) -> Any:
        return self._task.remote(fn, job)

    def wait_any(self, handles: list[Any]) -> list[Any]:
        done, _ = self._ray.wait(handles, num_returns=1)
        return list(done)

    def result(self, handle: Any) -> Any:
        return self._ray.get(handle)

    def error(self, exc: BaseException) -> BaseException:
        cause = getattr(exc, "cause", None)  # RayTaskError wraps the job's own exception
        return cause if isinstance(cause, BaseException) else exc


@dataclass(frozen=True)
class RayExecutor:
    """Jobs as Ray tasks; `address` None: `RAY_ADDRESS`, else a local instance (module doc)."""

    address: str | None = None
    name: str = "ray"
    resources: dict[str, float] = field(default_factory=dict)

    def run(
        self,
        jobs: Sequence[Job[Any]],
        fn: Callable[[Job[Any]], Any],
        on_done: OnDone | None = None,
        then: Then | None = None,
    ) -> list[JobFailure]:
        require_ray()
        import ray

        started = not ray.is_initialized()
        if started:
            # Ray's INFO start-up notice is not printed (quiet by default); its warnings and errors are.
            ray.init(address=self.address, log_to_driver=False, logging_level=logging.WARNING)
        try:
            return drive(_RayPool(ray, self.resources), jobs, fn, on_done, then)
        finally:
            if started:
                ray.shutdown()
