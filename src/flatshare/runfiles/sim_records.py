"""The simulated engine's record of one request, and its written form.

`RequestRecord` is the engine's own bookkeeping while a request runs (times in virtual seconds from the
start); it was also the old `flatshare sim` record file (`flatshare.runfiles.upgrade` reads those back).
It is never written as it is: `RequestRecord.to_record` turns it into the one request record format
(`flatshare.runfiles.records`, docs/records.md), the only place that does, for `flatshare sim`, the
virtual-time replay and the upgrade alike. The engine's samples: `flatshare.runfiles.samples`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from flatshare.runfiles.records import ReplayRecord

RUNNING, FINISHED = "running", "finished"
RUN_ENDED = "run ended before the reply"
SIM_ENGINE = "sim0"  # `flatshare sim`'s one engine, named as `flatshare replay --sim` names its first


@dataclass
class RequestRecord:
    """One request's life in the engine; filled in while it runs."""

    id: str
    cls: str
    priority: int
    arrival_s: float
    prompt_tokens: int
    max_tokens: int
    first_scheduled_s: float | None = None
    finish_s: float | None = None
    token_times_s: list[float] = field(default_factory=list)
    preemptions: int = 0
    status: str = RUNNING
    finish_reason: str | None = None
    wait_s: dict[str, float] = field(default_factory=dict)

    @property
    def ttft_s(self) -> float | None:
        return self.token_times_s[0] - self.arrival_s if self.token_times_s else None

    def to_record(
        self, *, session_id: str, engine: str, now: float, first_sentence_tokens: int | None = None
    ) -> ReplayRecord:
        """The written form of this request (docs/records.md). `arrival_s` (when it was sent) becomes
        `send_s`; a finished request is `ok`; any other is `failed` (error: `run ended before the reply`
        when it was still running as the engines stopped at `now`, else its status, e.g. `aborted`) and
        ends at `now` unless it has a finish time. `wait_s` is rounded to 6 decimals, null without tokens.
        `session_id`, `engine` and `first_sentence_tokens` are the caller's to know (`flatshare sim`: the
        request id, `sim0`, null)."""
        done = self.status == FINISHED
        return ReplayRecord(
            id=self.id,
            session_id=session_id,
            cls=self.cls,
            priority=self.priority,
            prompt_tokens=self.prompt_tokens,
            max_tokens=self.max_tokens,
            engine=engine,
            send_s=self.arrival_s,
            first_sentence_tokens=first_sentence_tokens,
            token_times_s=list(self.token_times_s),
            end_s=self.finish_s if self.finish_s is not None else now,
            finish_reason=self.finish_reason,
            status="ok" if done else "failed",
            error=None if done else (RUN_ENDED if self.status == RUNNING else self.status),
            first_scheduled_s=self.first_scheduled_s,
            wait_s={k: round(v, 6) for k, v in self.wait_s.items()} if self.token_times_s else None,
            preemptions=self.preemptions,
        )
