"""The product goal a make-room variant is judged against, criterion by criterion, at one caller count.

Every voice turn within target: the share of turns over target at most `over_target_points` above `alone`'s
at the same caller count, and the turn p95 within the target; while the coding agents keep at least
`agent_rate` of `vllm-priority`'s token rate and their slowest first-token wait is at most
`agent_wait_factor` times stock's (`vllm-priority`'s). A criterion the runs cannot judge (no `alone`, no
`vllm-priority`, no agents) is None, never a silent yes or no.
"""

from __future__ import annotations

from dataclasses import dataclass

from flatshare.colocation.results import CallerResult, ConditionResult

STOCK = "vllm-priority"
ALONE = "alone"


@dataclass(frozen=True)
class Goal:
    """The goal's thresholds; ValueError on one outside its range."""

    over_target_points: float = 0.01
    agent_rate: float = 0.97
    agent_wait_factor: float = 1.2

    def __post_init__(self) -> None:
        if not 0 <= self.over_target_points < 1 or not 0 < self.agent_rate <= 1 or self.agent_wait_factor < 1:
            raise ValueError(
                "goal: over_target_points in [0, 1), agent_rate in (0, 1], agent_wait_factor >= 1"
            )


GOAL = Goal()


@dataclass(frozen=True)
class Verdict:
    """Whether one condition meets each criterion of the goal (None: these runs cannot say)."""

    over_target: bool | None
    p95: bool | None
    agent_rate: bool | None
    agent_wait: bool | None

    @property
    def met(self) -> bool | None:
        """True when every criterion holds, False when one fails, else None."""
        parts = (self.over_target, self.p95, self.agent_rate, self.agent_wait)
        if False in parts:
            return False
        return None if None in parts else True


def agent_wait_ratio(m: ConditionResult, block: CallerResult) -> float | None:
    """The agents' slowest first-token wait as a multiple of stock's at the same caller count."""
    stock = block.conditions.get(STOCK)
    if m.agent_ttft_max_s is None or stock is None or not stock.agent_ttft_max_s:
        return None
    return round(m.agent_ttft_max_s / stock.agent_ttft_max_s, 4)


def over_target_limit(block: CallerResult, goal: Goal = GOAL) -> float | None:
    """The highest share of turns over target the goal allows: `alone`'s plus `over_target_points`."""
    alone = block.conditions.get(ALONE)
    if alone is None or alone.voice_over_target_frac is None:
        return None
    return alone.voice_over_target_frac + goal.over_target_points


def _at_most(value: float | None, limit: float | None) -> bool | None:
    return None if value is None or limit is None else value <= limit + 1e-9


def judge(m: ConditionResult, block: CallerResult, goal: Goal = GOAL) -> Verdict:
    """`m`'s verdict on each criterion, against `alone` and `vllm-priority` of the same `block`."""
    rate = m.agent_throughput_ratio
    return Verdict(
        over_target=_at_most(m.voice_over_target_frac, over_target_limit(block, goal)),
        p95=_at_most(m.voice_turn_p95_s, block.target_s),
        agent_rate=None if rate is None else rate >= goal.agent_rate - 1e-9,
        agent_wait=_at_most(agent_wait_ratio(m, block), goal.agent_wait_factor),
    )
