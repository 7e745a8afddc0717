"""sage's cost model and Gittins index, as pure functions (no vLLM).

flatshare's reconstruction, not the paper's rule: SageSched (arXiv 2603.07917) states only that it models a
request's cost with both compute and memory and schedules with an "uncertainty-aware" policy over the
requests' cost distributions to minimize the mean time to last token. For mean response time when only
each job's size distribution is known, queueing theory's answer is the Gittins index (optimal in the M/G/1
with unknown sizes; SRPT and SERPT are its special cases), so that is what sage uses.

Cost of finishing a request whose output will be L tokens, with k already decoded and `prefill_left`
tokens to (re)compute before its next decode (all of prompt and output for a preempted request, which vLLM
recomputes), in token-equivalents:

    prefill_weight * prefill_left + decode_weight * (L - k)
    + memory_weight * sum_{j=k}^{L-1} (prompt + j)        (KV tokens held over the decode steps)

Weights (defaults 1, 1, budget / capacity): a prefill token and a decode token each take one slot of
vLLM's per-step token budget (`max_num_batched_tokens` counts both), hence equal compute weights; holding
the whole KV cache for one step keeps every other request out of it for that step, which is charged as one
full step of budget, hence `max_num_batched_tokens / KV tokens` per token-step.

The Gittins index of a request with remaining cost C (a distribution) is
`max_d P(C <= d) / E[min(C, d)]`; over a discrete distribution the maximum is at one of its values. The
rank is its inverse (cost units; smaller goes first): a known cost c has rank c, so with every size known
the order is SRPT's. Conditioning on attained service: a request that has decoded k tokens has L > k.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from flatshare.scheduler.sage_predict import LengthDistribution

MIN_COST = 1e-6


@dataclass(frozen=True)
class CostWeights:
    """Token-equivalents per prefill token, per decode token, and per KV token held for one step."""

    prefill: float = 1.0
    decode: float = 1.0
    memory: float = 0.0


@dataclass(frozen=True)
class Progress:
    """What a request has done: `prompt` tokens, `decoded` output tokens, `prefill_left` tokens to compute
    before its next decode (prompt and output less what is computed and kept)."""

    prompt: int
    decoded: int
    prefill_left: int


def remaining_cost(weights: CostWeights, progress: Progress, length: int) -> float:
    """Cost of finishing a request whose output will be `length` tokens (module docstring)."""
    steps = max(0, length - progress.decoded)
    held = steps * progress.prompt + steps * (length - 1 + progress.decoded) / 2
    cost = weights.prefill * progress.prefill_left + weights.decode * steps + weights.memory * held
    return max(cost, MIN_COST)


def outlived(dist: LengthDistribution, decoded: int, cap: int | None) -> LengthDistribution:
    """The length distribution given L > `decoded`; a request that has outlived every value is assumed
    to run as long again (L = 2 * decoded, at most `cap`, at least decoded + 1)."""
    pairs = [(v, w) for v, w in zip(dist.values, dist.weights, strict=True) if v > decoded]
    if pairs:
        return LengthDistribution.of(pairs)
    guess = 2 * decoded if cap is None else min(2 * decoded, cap)
    return LengthDistribution.of([(max(guess, decoded + 1), 1.0)])


def gittins_index(costs: Sequence[float], weights: Sequence[float]) -> float:
    """`max_d P(C <= d) / E[min(C, d)]` for C taking ascending `costs` with `weights` (> 0)."""
    total = math.fsum(weights)
    best, done_w, done_cw = 0.0, 0.0, 0.0
    for cost, weight in zip(costs, weights, strict=True):
        done_w += weight
        done_cw += weight * cost
        expected = (done_cw + cost * (total - done_w)) / total
        best = max(best, (done_w / total) / expected)
    return best


def rank(dist: LengthDistribution, progress: Progress, weights: CostWeights, cap: int | None = None) -> float:
    """1 / Gittins index of the request's remaining cost (cost units; smaller is served first)."""
    given = outlived(dist, progress.decoded, cap)
    costs = [remaining_cost(weights, progress, v) for v in given.values]
    return 1.0 / gittins_index(costs, given.weights)


def aged_key(rank_value: float, arrival_s: float, aging_per_s: float) -> float:
    """The waiting queue's sort key: rank less `aging_per_s` per second waited, with the common `now` left
    out (`rank - aging * (now - arrival)` orders as `rank + aging * arrival`), so it never changes while
    the request waits. A request with key `r + a * t0` is passed only by requests whose key is smaller,
    so (ranks being > 0) only by requests that arrived before `t0 + r / a`: its wait is bounded."""
    return rank_value + aging_per_s * arrival_s


def starvation_bound_s(rank_value: float, aging_per_s: float) -> float:
    """How long after a request's arrival others may still arrive and be served ahead of it."""
    return math.inf if aging_per_s <= 0 else rank_value / aging_per_s


def prefill_victim(
    prefilling: Sequence[tuple[str, tuple[Any, ...]]], waiting_key: tuple[Any, ...]
) -> str | None:
    """Of the running requests still in their prefill, `(id, key)` with keys computed as the waiting
    queue's, the worst-keyed one if its key is worse than the waiting request's (Gittins is preemptive: the
    best index is served), else None."""
    if not prefilling:
        return None
    victim, key = max(prefilling, key=lambda item: item[1])
    return victim if key > waiting_key else None
