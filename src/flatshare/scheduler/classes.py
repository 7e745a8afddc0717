"""Whether the traffic make-room sees has anything to protect, and anything to protect it from.

make-room acts only between traffic classes: requests at or below `protect_priority` (voice turns) and
requests above it (agents). vLLM's default priority is 0 and so is `protect_priority`'s, so traffic that
nobody tagged is all protected and make-room quietly never acts. After `WARN_AFTER` requests this says so,
once, in the server's log.
"""

from __future__ import annotations

from dataclasses import dataclass

WARN_AFTER = 200
"""Requests seen before the mix is judged: enough that a few untagged health checks do not trigger it."""


@dataclass
class ClassMix:
    """Counts of protected and other requests as they arrive; `check` returns a warning once, when all of
    the first `WARN_AFTER` requests fell on one side of `protect_priority`."""

    protect_priority: int
    protected: int = 0
    other: int = 0
    warned: bool = False

    def add(self, priority: int) -> str | None:
        if priority <= self.protect_priority:
            self.protected += 1
        else:
            self.other += 1
        return self.check()

    def check(self) -> str | None:
        if self.warned or self.protected + self.other < WARN_AFTER:
            return None
        if self.protected and self.other:
            self.warned = True  # a mix: nothing to say, ever
            return None
        self.warned = True
        seen = self.protected + self.other
        if self.other == 0:
            return (
                f"make-room: all {seen} requests so far have priority <= protect_priority "
                f"({self.protect_priority}), so every request is protected and make-room has nothing to "
                "act against; tag the lower-priority traffic (agents) with a larger `priority` "
                "(vLLM's default is 0)"
            )
        return (
            f"make-room: none of the {seen} requests so far has priority <= protect_priority "
            f"({self.protect_priority}), so nothing is protected; send latency-critical requests with "
            f"priority <= {self.protect_priority}"
        )
