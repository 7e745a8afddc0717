"""Where a simulated engine's time went: its steps' time in the step model's parts, over a window.

The engine adds every step it launches (`SimEngine._launch`) that starts before `until_s` (None: every
step); the run's driver sets the window to the run's duration (`flatshare.replay.virtual.run_virtual`), so a
run's drain is left out. A step's parts are the step model's (`StepTimeProfile.step_parts`): the fixed
per-step cost, the pass's linear work, prefill attention and decode attention; `sync_load_s` is time a step
waited before its forward for synchronous CPU-tier loads. A decode-only step carries no prefill token
(make-room's held steps are of this kind). `floor_s` is what the steps would have cost carrying one token
each (`floor_step_s`: the fixed cost, and under the roofline model the weights read once): what a step costs
whatever it carries, so a variant that runs more steps for the same work pays for it there.

The passes' work (linear work and attention, not the fixed cost) is also split by the priority of the
request it served (`work_s_priority_<p>`): each request's attention as the model prices it, and the pass's
linear work in proportion to its tokens (under the roofline model that includes the weights' read, so a
held step's read is charged to the requests in it).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from flatshare.sim.profile import ScheduledWork, StepTimeProfile

FIELDS = (
    "steps",
    "decode_only_steps",
    "fixed_s",
    "linear_s",
    "prefill_attention_s",
    "decode_attention_s",
    "sync_load_s",
    "decode_only_s",
    "floor_s",
)
WORK_PREFIX = "work_s_priority_"


def floor_step_s(profile: StepTimeProfile) -> float:
    """What one step costs the profile carrying a single decode token at no context."""
    return profile.step_time([ScheduledWork(1, 0, is_decode=True)])


def work_key(priority: int) -> str:
    """The ledger's key for the work that served requests of `priority`."""
    return f"{WORK_PREFIX}{priority}"


@dataclass
class StepLedger:
    """Running sums over the steps that start before `until_s`; `to_json` gives them as a table."""

    profile: StepTimeProfile
    until_s: float | None = None
    steps: int = 0
    decode_only_steps: int = 0
    fixed_s: float = 0.0
    linear_s: float = 0.0
    prefill_attention_s: float = 0.0
    decode_attention_s: float = 0.0
    sync_load_s: float = 0.0
    decode_only_s: float = 0.0
    floor_s: float = 0.0
    work_by_priority: dict[int, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._floor = floor_step_s(self.profile)

    def counts(self, start_s: float) -> bool:
        """Whether a step starting at `start_s` lies in the window (`add` ignores the others)."""
        return self.until_s is None or start_s < self.until_s

    def add(
        self, start_s: float, work: Sequence[ScheduledWork], priorities: Sequence[int], sync_load_s: float
    ) -> None:
        """Count one launched step that starts at `start_s` (ignored at or after `until_s`); `priorities[i]`
        is the priority of the request `work[i]` served."""
        if not self.counts(start_s):
            return
        if len(priorities) != len(work):
            raise ValueError("one priority per scheduled request")
        parts = self.profile.step_parts(work)
        self.steps += 1
        self.floor_s += self._floor
        self.fixed_s += parts.fixed_s
        self.linear_s += parts.linear_s
        self.prefill_attention_s += parts.prefill_attention_s
        self.decode_attention_s += parts.decode_attention_s
        self.sync_load_s += sync_load_s
        if all(item.is_decode for item in work):
            self.decode_only_steps += 1
            self.decode_only_s += parts.total_s + sync_load_s
        tokens = sum(item.tokens for item in work)
        for item, priority in zip(work, priorities, strict=True):
            own = self.profile.attention_s(item) + parts.linear_s * item.tokens / tokens
            self.work_by_priority[priority] = self.work_by_priority.get(priority, 0.0) + own

    @property
    def busy_s(self) -> float:
        """Seconds the engine spent in steps (parts and synchronous loads)."""
        return (
            self.fixed_s
            + self.linear_s
            + self.prefill_attention_s
            + self.decode_attention_s
            + self.sync_load_s
        )

    def to_json(self) -> dict[str, float]:
        """The sums (seconds rounded to the microsecond), `busy_s`, `window_s` (`until_s`, when set) and
        the work by priority."""
        out = {f: round(float(getattr(self, f)), 6) for f in FIELDS}
        out["busy_s"] = round(self.busy_s, 6)
        if self.until_s is not None:
            out["window_s"] = float(self.until_s)
        for priority in sorted(self.work_by_priority):
            out[work_key(priority)] = round(self.work_by_priority[priority], 6)
        return out


def summed(ledgers: Iterable[Mapping[str, float]]) -> dict[str, float]:
    """Several engines' `to_json` tables added field by field (empty for none); the window is theirs,
    not a sum."""
    out: dict[str, float] = {}
    for ledger in ledgers:
        for key, value in ledger.items():
            out[key] = value if key == "window_s" else round(out.get(key, 0.0) + value, 6)
    return out
