"""Server-sent events passing through the gateway, whole events at a time.

Upstream bytes arrive in arbitrary pieces; `EventFramer` hands on only complete events (up to the last
blank line, by the spec's framing: lines end with CRLF, LF or CR, so `\\r\\n\\r\\n` ends an event as
`\\n\\n` does; `flatshare.protocol.sse.EventScanner`) and keeps the rest, so if the upstream connection
breaks mid-event the client never sees half an event followed by the gateway's error event. An event
that grows past `max_event_bytes` without ending raises `EventTooLarge` (the relay ends the stream with
an error event): a backend that never sends a blank line costs bounded memory, and each byte is
scanned once. The framer also notes the first event that carries a token (for the first-token
histogram) and whether the stream ended with `data: [DONE]` (a stream that ends without it was cut short).

This is not `flatshare.protocol.sse.StreamReader` (the client-side reader that counts tokens) on
purpose: the gateway relays upstream bytes unchanged and cuts them only at event ends, so it works on
bytes and never re-encodes an event; it only peeks at events for its first-token histogram.
"""

from __future__ import annotations

import json

from flatshare.protocol.sse import DONE_EVENT, MAX_EVENT_BYTES, EventScanner, EventTooLarge, event_data

__all__ = ["DONE", "EventFramer", "EventTooLarge", "carries_token", "token_events"]

DONE = DONE_EVENT
_DONE_DATA = b"[DONE]"


def carries_token(data: bytes) -> bool:
    """Whether one event's data (`{...}`) has generated output: text, a delta with content, or a finish."""
    if not data.startswith(b"{"):
        return False
    try:
        chunk = json.loads(data)
    except (ValueError, RecursionError):
        return False
    choices = chunk.get("choices") if isinstance(chunk, dict) else None
    for choice in choices if isinstance(choices, list) else ():
        if not isinstance(choice, dict):
            continue
        delta = choice.get("delta")
        if choice.get("text") or choice.get("finish_reason"):
            return True
        if isinstance(delta, dict) and any(value for key, value in delta.items() if key != "role"):
            return True
    return False


def token_events(events: bytes) -> int:
    """How many of the whole `events` carry a token (`carries_token`)."""
    return sum(carries_token(data) for data in event_data(events))


class EventFramer:
    """Cuts a byte stream into whole events (module docstring)."""

    def __init__(self, max_event_bytes: int = MAX_EVENT_BYTES) -> None:
        self._scanner = EventScanner(max_event_bytes)
        self.first_token = False
        self.done = False

    def feed(self, chunk: bytes) -> bytes:
        """The complete events now available (possibly b""); `EventTooLarge` past the bound."""
        ready = self._scanner.feed(chunk)
        if ready:
            self._inspect(ready)
        return ready

    def flush(self) -> bytes:
        """Whatever is left when the upstream ended cleanly (an unterminated last event)."""
        rest = self._scanner.flush()
        if rest.strip():
            self._inspect(rest)
        return rest

    def _inspect(self, ready: bytes) -> None:
        payloads = event_data(ready)
        if payloads:
            self.done = payloads[-1] == _DONE_DATA
        if not self.first_token:
            self.first_token = any(carries_token(data) for data in payloads)
