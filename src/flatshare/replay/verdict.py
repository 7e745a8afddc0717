"""What a finished replay tells its operator besides the record files: how many requests failed against
the share the run may tolerate (`--max-failed`), and the endpoints whose /metrics could not be sampled.

Pure functions of run.json's content (`flatshare.runfiles.run.write_replay_run`), so the command line and tests
read the same verdict. A failed request is status `failed` (a connection error, an HTTP error, a broken
stream); `refused` is an admission decision (a gateway's 429), not a failure.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ReplayVerdict:
    """Failed requests against the tolerated share, and /metrics scrape failures by endpoint."""

    requests: int
    failed: int
    max_failed: float
    sample_errors: Mapping[str, int]
    last_sample_error: Mapping[str, str]

    def __post_init__(self) -> None:
        if not 0.0 <= self.max_failed <= 1.0:
            raise ValueError(f"max_failed must be a fraction in [0, 1], got {self.max_failed!r}")

    @property
    def failed_share(self) -> float:
        return self.failed / self.requests if self.requests else 0.0

    @property
    def passed(self) -> bool:
        """True when no more than `max_failed` of the requests failed."""
        return self.failed_share <= self.max_failed

    def failure_line(self) -> str:
        """One line on the failed requests (the reason the command exits non-zero when not `passed`)."""
        return (
            f"{self.failed} of {self.requests} requests failed ({self.failed_share:.1%}; --max-failed "
            f"{self.max_failed:g}); see the error field in requests.jsonl"
        )

    def sample_lines(self) -> list[str]:
        """One line per endpoint whose /metrics scrapes failed: samples.jsonl lacks those instants."""
        return [
            f"{n} /metrics scrapes of {name} failed (last: {self.last_sample_error.get(name) or 'unknown'}); "
            "samples.jsonl has no engine samples for them"
            for name, n in sorted(self.sample_errors.items())
            if n
        ]


def verdict(run: Mapping[str, Any], max_failed: float = 0.0) -> ReplayVerdict:
    """The verdict on a run.json's content (`run_summary`'s statuses, the wall-clock driver's stats)."""
    stats = run.get("stats") or {}
    return ReplayVerdict(
        requests=int(run.get("requests", 0)),
        failed=int(run.get("statuses", {}).get("failed", 0)),
        max_failed=max_failed,
        sample_errors=dict(stats.get("sample_errors") or {}),
        last_sample_error=dict(stats.get("last_sample_error") or {}),
    )
