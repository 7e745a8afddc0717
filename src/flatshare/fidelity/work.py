"""The engine work a calibration probe covers, step by step, as vLLM's scheduler lays it out.

vLLM (chunked prefill, no prefix-cache hits: every probe prompt is unique) schedules running requests
first, one decode token each, then fills the rest of the step's token budget (`max_num_batched_tokens`)
with prefill chunks of waiting or partially prefilled requests in arrival order. These helpers build
that layout for the probe shapes of `flatshare.fidelity.calibrate`, so the fit prices each probe with
the same work the simulator would see.
"""

from __future__ import annotations

from flatshare.sim.profile import ScheduledWork

Step = tuple[ScheduledWork, ...]


def decode_step(batch: int, context: int) -> Step:
    """One step in which `batch` requests each decode one token on `context` tokens."""
    return tuple(ScheduledWork(1, context, True) for _ in range(batch))


def prefill_steps(lengths: list[int], budget: int, decodes: Step = ()) -> list[Step]:
    """Steps that prefill prompts of `lengths` (sent together, in order) with `decodes` in every step.

    Each step gives `budget - len(decodes)` tokens to the prompts in order; a prompt whose prefill ends
    in a step samples its first token there (it joins the decodes from the next step on, which this
    layout leaves out: probes that care wait for the whole batch).
    """
    room = budget - len(decodes)
    if room <= 0:
        raise ValueError(f"{len(decodes)} decodes leave no room for prefill in a budget of {budget}")
    done = [0] * len(lengths)
    steps: list[Step] = []
    while any(d < n for d, n in zip(done, lengths, strict=True)):
        left = room
        work = list(decodes)
        for i, n in enumerate(lengths):
            if left == 0:
                break
            take = min(n - done[i], left)
            if take > 0:
                work.append(ScheduledWork(take, done[i], False))
                done[i] += take
                left -= take
        steps.append(tuple(work))
    return steps


def beside_steps(
    prompt: int, decodes: int, decode_context: int, budget: int
) -> tuple[list[Step], list[float]]:
    """Steps and weights for the time to first token of one prompt sent while `decodes` requests decode:
    half a decode step already running when it arrives, then its chunks beside the decodes."""
    running = decode_step(decodes, decode_context)
    steps = [running, *prefill_steps([prompt], budget, running)]
    return steps, [0.5] + [1.0] * (len(steps) - 1)
