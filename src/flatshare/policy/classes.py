"""The traffic classes, by vLLM priority (vLLM's meaning: a lower value runs first). The one place the
numbers live: workloads give their requests these priorities (`DEFAULT_PRIORITY`), the gates class
requests by them (`Classes`, whose bounds every gate's settings carry through `ClassSettings`), and the
engine-side mechanisms protect what is at or below a priority set from these.

- voice turns: `VOICE_PRIORITY` (0), the most important traffic;
- interactive requests (chat, code, the admission experiment's short requests): `INTERACTIVE_PRIORITY` (1);
- agents and long batch requests: `AGENT_PRIORITY` (10), the least important.
"""

from __future__ import annotations

from dataclasses import dataclass

VOICE_PRIORITY = 0
INTERACTIVE_PRIORITY = 1
AGENT_PRIORITY = 10

DEFAULT_PRIORITY = {
    "voice": VOICE_PRIORITY,
    "chat": INTERACTIVE_PRIORITY,
    "code": INTERACTIVE_PRIORITY,
    "short": INTERACTIVE_PRIORITY,
    "agent": AGENT_PRIORITY,
    "long": AGENT_PRIORITY,
}
"""Each workload class's priority, latency-critical classes first (a class not listed gets
`INTERACTIVE_PRIORITY` where a reader needs a default)."""


@dataclass(frozen=True)
class Classes:
    """Which priorities are voice turns and which are agents: voice `priority <= voice_max_priority`,
    agents `priority >= agent_min_priority`, anything between is "other"."""

    voice_max_priority: int = VOICE_PRIORITY
    agent_min_priority: int = AGENT_PRIORITY

    def __post_init__(self) -> None:
        if self.voice_max_priority >= self.agent_min_priority:
            raise ValueError(
                f"voice_max_priority ({self.voice_max_priority}) must be below "
                f"agent_min_priority ({self.agent_min_priority})"
            )

    def of(self, priority: int) -> str:
        if priority <= self.voice_max_priority:
            return "voice"
        return "agent" if priority >= self.agent_min_priority else "other"


@dataclass(frozen=True)
class ClassSettings:
    """The class bounds every gate's settings carry (validated on construction); a subclass that adds its
    own checks calls `super().__post_init__()`."""

    voice_max_priority: int = VOICE_PRIORITY
    agent_min_priority: int = AGENT_PRIORITY

    def __post_init__(self) -> None:
        self.classes()  # validates

    def classes(self) -> Classes:
        return Classes(self.voice_max_priority, self.agent_min_priority)
