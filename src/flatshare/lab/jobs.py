"""Jobs: one run (or a few runs sharing a seed) of an experiment, and the report of one that failed."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

P = TypeVar("P")


@dataclass(frozen=True)
class Job(Generic[P]):
    """One unit of work for an executor.

    `condition` and `seed` name it in progress and failure reports; `params` is everything the run
    function needs besides them (a frozen dataclass or tuple of them). The whole job is pickled to a
    worker process or Ray node, so it must be picklable, and the run's output must depend on it alone.
    """

    condition: str
    seed: int
    params: P

    def __post_init__(self) -> None:
        if not self.condition:
            raise ValueError("job: condition must be non-empty")


@dataclass(frozen=True)
class JobFailure:
    """A job that raised: its condition, seed and the error (`Type: message`)."""

    condition: str
    seed: int
    error: str

    def describe(self) -> str:
        return f"{self.condition} seed {self.seed}: {self.error}"


class JobsFailed(RuntimeError):
    """Raised after every job has finished when some failed; `failures` names them."""

    def __init__(self, failures: Sequence[JobFailure]) -> None:
        self.failures = tuple(failures)
        lines = "; ".join(f.describe() for f in self.failures)
        super().__init__(f"{len(self.failures)} job(s) failed: {lines}")


def failure(job: Job[object], exc: BaseException) -> JobFailure:
    message = str(exc).strip().splitlines()
    return JobFailure(
        job.condition, job.seed, f"{type(exc).__name__}: {message[0] if message else ''}".strip()
    )
