"""Where a simulated engine's time went: its steps' time in the step model's parts, over a window.

The engine adds every step it launches (`SimEngine._launch`) that starts before `until_s` (None: every
step); the run's driver sets the window to the run's duration (`flatshare.replay.virtual.run_virtual`), so a
run's drain is left out. A step's parts are the step model's (`StepTimeProfile.step_parts`): the fixed
per-step cost, the pass's linear work, prefill attention and decode attention; `sync_load_s` is time a step
waited before its forward for synchronous CPU-tier loads. A decode-only step carries no prefill token
(make-room's held steps are of this kind). `floor_s` is what the steps would have cost carrying one token
each (`floor_step_s`: the fixed cost, and under the roofline model the weights read once): what a step costs
whatever it carries, so a variant that runs more steps for the same work pays for it there.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from flatshare.sim.profile import ScheduledWork, StepParts, StepTimeProfile

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


def floor_step_s(profile: StepTimeProfile) -> float:
    """What one step costs the profile carrying a single decode token at no context."""
    return profile.step_time([ScheduledWork(1, 0, is_decode=True)])


@dataclass
class StepLedger:
    """Running sums over the steps that start before `until_s`; `to_json` gives them as a table."""

    floor_step: float = 0.0
    """`floor_step_s` of the engine's profile."""
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

    def add(
        self, start_s: float, work: Iterable[ScheduledWork], parts: StepParts, sync_load_s: float
    ) -> None:
        """Count one launched step that starts at `start_s` (ignored at or after `until_s`)."""
        if self.until_s is not None and start_s >= self.until_s:
            return
        self.steps += 1
        self.floor_s += self.floor_step
        self.fixed_s += parts.fixed_s
        self.linear_s += parts.linear_s
        self.prefill_attention_s += parts.prefill_attention_s
        self.decode_attention_s += parts.decode_attention_s
        self.sync_load_s += sync_load_s
        if all(item.is_decode for item in work):
            self.decode_only_steps += 1
            self.decode_only_s += parts.total_s + sync_load_s

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
        """The sums (seconds rounded to the microsecond), `busy_s` included; no window."""
        out = {f: round(float(getattr(self, f)), 6) for f in FIELDS}
        out["busy_s"] = round(self.busy_s, 6)
        return out


def summed(ledgers: Iterable[Mapping[str, float]]) -> dict[str, float]:
    """Several engines' `to_json` tables added field by field (empty for none)."""
    out: dict[str, float] = {}
    for ledger in ledgers:
        for key, value in ledger.items():
            out[key] = round(out.get(key, 0.0) + value, 6)
    return out


__all__ = ["FIELDS", "StepLedger", "summed"]
