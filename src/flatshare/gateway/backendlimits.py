"""What the gateway takes from a backend: bounds on its answers and on its silence (`[backend_limits]`).

A backend is trusted to serve, not to be well behaved: a page it sends, an event it streams and the
time it takes to start answering are bounded here, each a setting with a safe default
(docs/gateway.md, "Security model"). The checks live where the bytes arrive (`poller.py`, `sse.py`,
`relay.py`, `proxy.py`); this is only the settings.
"""

from __future__ import annotations

from dataclasses import dataclass

MIB = 1024 * 1024


@dataclass(frozen=True)
class BackendLimits:
    """Bounds on what a backend sends.

    `max_metrics_bytes`: the most a poll reads of a `/metrics`, `/health` or `/v1/models` answer; a
    larger one is a failed poll (vLLM's page is tens of kilobytes; pages above `PARSE_INLINE_BYTES` are
    parsed off the event loop). `max_event_bytes`: the largest server-sent event relayed; a stream whose
    event grows past it without ending is cut with an error event. `first_byte_timeout_s`: how long a
    streaming request waits for the backend's response head (vLLM starts a stream's response at once,
    before queueing; a non-streaming answer starts only once generated, so it stays bounded by
    `upstream_timeout_s` alone); a backend that misses it is degraded: it gets no new requests while a
    backend that is not degraded can take them, for `degraded_retry_s`, after which one request may try
    it again; any answer in time ends the degradation.
    """

    max_metrics_bytes: int = 4 * MIB
    max_event_bytes: int = 1 * MIB
    first_byte_timeout_s: float = 30.0
    degraded_retry_s: float = 30.0

    def __post_init__(self) -> None:
        for name in ("max_metrics_bytes", "max_event_bytes", "first_byte_timeout_s", "degraded_retry_s"):
            value = getattr(self, name)
            if not 0 < value < float("inf"):
                raise ValueError(f"backend_limits.{name} must be a finite number > 0, got {value}")
        if self.max_metrics_bytes < 1024 or self.max_event_bytes < 1024:
            raise ValueError("backend_limits.max_metrics_bytes and max_event_bytes must be >= 1024")


PARSE_INLINE_BYTES = 256 * 1024
"""A /metrics page larger than this is parsed in a worker thread, so the event loop (and /health) keeps
answering while it is read."""
