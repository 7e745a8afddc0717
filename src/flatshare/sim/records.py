"""What the simulated engine reports: one record per request and engine samples over time.

Record format (`requests.jsonl`, one JSON object a line, times in virtual seconds from the start):
`id`, `cls`, `priority`, `arrival_s`, `prompt_tokens`, `max_tokens`, `output_tokens`,
`first_scheduled_s` (first step that gave it tokens), `ttft_s` (first token minus arrival),
`finish_s` (absolute), `token_times_s` (absolute time of every output token), `preemptions`,
`status` (`finished`), `wait_s` (where the time before the first token went, by part: see
`flatshare.sim.waits`). Samples (`samples.jsonl`): `t`, `kv_usage` (0-1, blocks held by requests,
as `vllm:kv_cache_usage_perc`), `running`, `waiting`, `preemptions_total`, `cpu_tier_blocks`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

RECORD_VERSION = 1


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
    status: str = "running"
    finish_reason: str | None = None
    wait_s: dict[str, float] = field(default_factory=dict)

    @property
    def ttft_s(self) -> float | None:
        return self.token_times_s[0] - self.arrival_s if self.token_times_s else None

    def to_json(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["ttft_s"] = self.ttft_s
        data["output_tokens"] = len(self.token_times_s)
        return data


@dataclass(frozen=True)
class EngineSample:
    """The engine's state at virtual time `t`, as vLLM exports it on /metrics."""

    t: float
    kv_usage: float
    running: int
    waiting: int
    preemptions_total: int
    cpu_tier_blocks: int

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)
