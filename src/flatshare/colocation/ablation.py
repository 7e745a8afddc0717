"""make-room's ablation: each variant beside the variant below it, at each caller count, with its verdict on
each criterion of the goal (`flatshare.colocation.goal`).

"The variant below" is written down, not parsed from condition keys: `EDGES` lists each variant with its
parent (the condition it adds one thing to) and what it adds. A run that lacks a parent is compared with
the nearest ancestor it holds; a variant the run lacks has no row. The root is stock vLLM with voice at top
priority (`vllm-priority`), shown first as the reference.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from flatshare.colocation.goal import GOAL, STOCK, Goal, agent_wait_ratio, judge
from flatshare.colocation.results import AblationRow, CallerResult

if TYPE_CHECKING:
    from flatshare.colocation.results import ColocationSummary


@dataclass(frozen=True)
class Edge:
    """`child` is `parent` plus `adds`."""

    child: str
    parent: str
    adds: str


_T48 = "make-room-t48"
# The ride conditions' suffixes (`colocation.experiment.RIDES`) and what each lets into a held step.
_RIDES = {
    "ride64": "64 tokens a step",
    "ride256": "256 tokens a step",
    "ride256-ctx8k": "256 tokens a step, contexts under 8k",
    "ride64-waiting": "64 tokens a step, waiting requests too",
    "ride128-waiting": "128 tokens a step, waiting requests too",
    "ride64-waiting-ctx8k": "64 tokens a step, waiting requests too, contexts under 8k",
}
EDGES = (
    Edge("make-room-preempt", STOCK, "preemption for a waiting voice turn"),
    *(Edge(f"make-room-t{t}", "make-room-preempt", f"the prefill hold, window T={t}") for t in (8, 16)),
    *(Edge(f"make-room-t{t}", "make-room-t16", f"a wider window, T={t}") for t in (24, 32, 48, 64)),
    Edge("make-room-t48-decode", _T48, "the decode hold"),
    Edge("make-room-t48-256", _T48, "256-token steps"),
    Edge("make-room-t48-256-decode", "make-room-t48-256", "the decode hold"),
    Edge("make-room-t48-pin", _T48, "the prefix pin (10% of KV)"),
    Edge("make-room-t48-pinres", "make-room-t48-pin", "the pin yields to protected turns"),
    Edge("make-room-t48-tail", _T48, "small tails recomputed, not loaded"),
    Edge("make-room-t48-hint", _T48, "arrival hints"),
    Edge("make-room-t48-sentence", _T48, "the hold ends at the first sentence"),
    Edge("make-room-t48-pinres-tail", "make-room-t48-pinres", "small tails recomputed, not loaded"),
    Edge("make-room-t48-pin-tail-hint", "make-room-t48-pin", "small tails recomputed, and arrival hints"),
    Edge("make-room-t48-pinres-tail-hint", "make-room-t48-pinres-tail", "arrival hints"),
    Edge(
        "make-room-t48-pinres-tail-hint-sentence",
        "make-room-t48-pinres-tail-hint",
        "the hold ends at the first sentence",
    ),
    # Protected KV from the CPU tier (the connector's settings, `flatshare.connector`).
    Edge("make-room-t48-syncload", _T48, "protected KV loaded inside the step"),
    Edge("make-room-t48-tierkeep", _T48, "the CPU tier evicts protected blocks last"),
    Edge(
        "make-room-t48-syncload-tierkeep",
        "make-room-t48-syncload",
        "the CPU tier evicts protected blocks last",
    ),
    Edge(
        "make-room-t48-syncload-tierkeep-tail-hint",
        "make-room-t48-syncload-tierkeep",
        "small tails recomputed, and arrival hints",
    ),
    # Holding only while at risk (`hold_deadline_s`), over the connector stack ending at the first sentence.
    Edge(
        "make-room-t48-syncload-tierkeep-tail-hint-sentence",
        "make-room-t48-syncload-tierkeep-tail-hint",
        "the hold ends at the first sentence",
    ),
    *(
        Edge(
            f"make-room-t48-syncload-tierkeep-tail-hint-sentence-due{due}",
            "make-room-t48-syncload-tierkeep-tail-hint-sentence",
            f"a decoding reply is held only while at risk of its first sentence later than {due / 1000:.2f} s",
        )
        for due in (450, 550, 650)
    ),
    # Hints that say when their turn is due (`flatshare_hint_in_s`), over the stack with 1 s hint windows.
    Edge(
        "make-room-t48-syncload-tierkeep-tail-hint-sentence-w1",
        "make-room-t48-syncload-tierkeep-tail-hint-sentence",
        "hint windows of 1 s, not 0.5",
    ),
    Edge(
        "make-room-t48-syncload-tierkeep-tail-hint-sentence-hintdue",
        "make-room-t48-syncload-tierkeep-tail-hint-sentence-w1",
        "hints say the turn is due in the recogniser's median delay; the hold starts a chunk step before",
    ),
    Edge(
        "make-room-t48-syncload-tierkeep-tail-hint-sentence-hintdue-p10",
        "make-room-t48-syncload-tierkeep-tail-hint-sentence-w1",
        "hints say the turn is due in the recogniser's 10th-percentile delay; the hold starts a chunk step before",
    ),
    # Preempted requests held in the CPU tier until they come back (`keep_preempted`).
    Edge(
        "make-room-t48-keepvictims",
        _T48,
        "the CPU tier holds preempted requests' blocks until they come back",
    ),
    Edge(
        "make-room-t48-syncload-tierkeep-tail-hint-sentence-hintdue-keepvictims",
        "make-room-t48-syncload-tierkeep-tail-hint-sentence-hintdue",
        "the CPU tier holds preempted requests' blocks until they come back",
    ),
    # The ride before the turn (`hint_ride_tokens`).
    Edge(
        "make-room-t48-syncload-tierkeep-tail-hint-sentence-hintdue-keepvictims-hintride",
        "make-room-t48-syncload-tierkeep-tail-hint-sentence-hintdue-keepvictims",
        "held agent prefill rides in the steps held for a hint before its turn, 128 tokens a step",
    ),
    # Preempted requests loaded back inside the step (`sync_load_preempted`).
    Edge(
        "make-room-t48-syncload-tierkeep-tail-hint-sentence-hintdue-keepvictims-hintride-syncvictims",
        "make-room-t48-syncload-tierkeep-tail-hint-sentence-hintdue-keepvictims-hintride",
        "preempted requests' held blocks loaded back inside the step that admits them again",
    ),
    # The ride (`hold_ride_*`), over T=48 and over the pin stack.
    *(
        Edge(f"{base}-{ride}", base, f"held agent prefill rides, {adds}")
        for base in (_T48, "make-room-t48-pinres-tail-hint")
        for ride, adds in _RIDES.items()
    ),
)
PARENT: Mapping[str, Edge] = {e.child: e for e in EDGES}


def below(key: str, present: Mapping[str, object]) -> str | None:
    """The nearest ancestor of `key` along `EDGES` that `present` holds (None: none, or `key` is the root)."""
    edge = PARENT.get(key)
    while edge is not None:
        if edge.parent in present:
            return edge.parent
        edge = PARENT.get(edge.parent)
    return None


def _delta(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else round(a - b, 4)


def _adds(key: str, lower: str | None) -> str:
    """What `key` adds over `lower`: its edge's words, joined along the path when ancestors are missing."""
    words: list[str] = []
    edge = PARENT.get(key)
    while edge is not None:
        words.insert(0, edge.adds)
        if edge.parent == lower:
            break
        edge = PARENT.get(edge.parent)
    return "; ".join(words) if lower is not None else ""


def _row(callers: int, key: str, block: CallerResult, goal: Goal) -> AblationRow:
    m = block.conditions[key]
    lower = below(key, block.conditions)
    b = block.conditions[lower] if lower is not None else None
    ci = m.voice_call_ci.get("voice_over_target_frac")
    verdict = judge(m, block, goal)
    return AblationRow(
        callers=callers,
        condition=key,
        below=lower,
        adds=_adds(key, lower),
        over_target=m.voice_over_target_frac,
        over_target_ci=None if ci is None else (ci[0], ci[1]),
        over_target_delta=None if b is None else _delta(m.voice_over_target_frac, b.voice_over_target_frac),
        turn_p95_s=m.voice_turn_p95_s,
        turn_p95_delta_s=None if b is None else _delta(m.voice_turn_p95_s, b.voice_turn_p95_s),
        agent_rate=m.agent_throughput_ratio,
        agent_rate_delta=None if b is None else _delta(m.agent_throughput_ratio, b.agent_throughput_ratio),
        agent_wait=agent_wait_ratio(m, block),
        meets_over_target=verdict.over_target,
        meets_p95=verdict.p95,
        meets_agent_rate=verdict.agent_rate,
        meets_agent_wait=verdict.agent_wait,
        meets_goal=verdict.met,
    )


def _keys() -> Iterator[str]:
    yield STOCK
    yield from (e.child for e in EDGES)


def ablation_rows(summary: ColocationSummary, goal: Goal = GOAL) -> tuple[AblationRow, ...]:
    """One row per variant of `EDGES` (and the root) present with voice turns, caller count by caller
    count, in `EDGES`' order."""
    return tuple(
        _row(callers, key, summary.by_callers[callers], goal)
        for callers in summary.callers
        for key in _keys()
        if key in summary.by_callers[callers].conditions
        and summary.by_callers[callers].conditions[key].n_voice_turns
    )
