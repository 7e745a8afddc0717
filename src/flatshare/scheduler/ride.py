"""The ride: during make-room's hold, a bounded amount of held prefill rides along in the step.

The hold keeps lower-priority prefill out of the steps that produce a protected reply's first T tokens.
Most of those steps are the reply's decode: a handful of decode tokens in a step that could carry far
more, so the agents' prefill loses whole steps for a gain that is mostly in the step's attention and
linear work. The ride lets held running prefills back in, a chunk at most `hold_ride_tokens` in all per
step, and optionally only requests whose context after the chunk is at most `hold_ride_max_context`
(a chunk's attention grows with the context it reads; its linear work is nearly flat for small chunks on
a GPU). The rule uses only what vLLM's scheduler knows: token counts and context lengths.

A step rides only when no protected work could lose tokens to the riders (`ride_allowed`): nothing at
or above the hold's priority prefills or waits for admission, and the step's token budget holds what
every other running request takes plus the ride. Riders come from the running requests only (waiting
ones stay held: admitting one would allocate its blocks inside the protected window), in vLLM's running order.

The ride before the turn (`hint_ride_tokens`) is the same ride in the steps held for arrival hints alone,
before their turn arrives, stopped once a step carrying it could still run when the turn is due
(`mechanisms.py`, `pace.StepPace.step_end_s`).

Pure functions: `make_room.py` reads vLLM's state into `RideView`s and caps each rider's chunk through
vLLM's per-request chunk hook.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple


class RideView(NamedTuple):
    """A held running prefill as the ride sees it."""

    request_id: str
    remaining: int
    """Prompt (or resumed) tokens still to compute."""
    context: int
    """Tokens already computed: what the chunk's attention reads."""


def ride_allowed(
    protected_prefilling: bool, protected_waiting: bool, others: int, ride_tokens: int, step_budget: int
) -> bool:
    """Whether this held step may carry riders: no protected request prefills or waits, and the step's token
    budget holds what the other running requests take (`others`: their decodes, draft tokens included)
    plus the whole ride, so no protected token is cut."""
    if ride_tokens <= 0 or protected_prefilling or protected_waiting:
        return False
    return others + ride_tokens <= step_budget


def choose_riders(held: Iterable[RideView], ride_tokens: int, max_context: int) -> dict[str, int]:
    """The riders and each one's chunk cap, in `held`'s order, `ride_tokens` in all. With `max_context`
    above 0, a request rides only if its context after the chunk stays within it (its chunk may be cut
    to fit)."""
    riders: dict[str, int] = {}
    left = ride_tokens
    for view in held:
        if left <= 0:
            break
        chunk = min(view.remaining, left)
        if max_context > 0:
            chunk = min(chunk, max_context - view.context)
        if chunk <= 0:
            continue
        riders[view.request_id] = chunk
        left -= chunk
    return riders
