"""Server-sent events passing through the gateway, whole events at a time.

Upstream bytes arrive in arbitrary pieces; `EventFramer` hands on only complete events (up to the last
blank line, `\\n\\n`, which is how vLLM frames them) and keeps the rest, so if the upstream connection
breaks mid-event the client never sees half an event followed by the gateway's error event. It also
notes the first event that carries a token (for the first-token histogram) and whether the stream
ended with `data: [DONE]` (a stream that ends without it was cut short).

This is not `flatshare.protocol.sse` (the client-side reader that counts tokens) on purpose: the gateway
relays upstream bytes unchanged and cuts them only at event ends, so it works on bytes and never
re-encodes an event; it only peeks at events for its first-token histogram.
"""

from __future__ import annotations

import json

from flatshare.protocol.sse import DONE_EVENT

DONE = DONE_EVENT
_SEPARATOR = b"\n\n"


def carries_token(event: bytes) -> bool:
    """Whether one event (`data: {...}`) has generated output: text, a delta with content, or a finish."""
    if not event.startswith(b"data: ") or event.startswith(b"data: [DONE]"):
        return False
    try:
        chunk = json.loads(event[6:])
    except ValueError:
        return False
    choices = chunk.get("choices") if isinstance(chunk, dict) else None
    for choice in choices or ():
        if not isinstance(choice, dict):
            continue
        delta = choice.get("delta")
        if choice.get("text") or choice.get("finish_reason"):
            return True
        if isinstance(delta, dict) and any(value for key, value in delta.items() if key != "role"):
            return True
    return False


class EventFramer:
    """Cuts a byte stream into whole events (module docstring)."""

    def __init__(self) -> None:
        self._pending = b""
        self.first_token = False
        self.done = False

    def feed(self, chunk: bytes) -> bytes:
        """The complete events now available (possibly b""); returns True-ish data only at event ends."""
        data = self._pending + chunk if self._pending else chunk
        cut = data.rfind(_SEPARATOR)
        if cut < 0:
            self._pending = data
            return b""
        cut += len(_SEPARATOR)
        ready, self._pending = data[:cut], data[cut:]
        self._inspect(ready)
        return ready

    def flush(self) -> bytes:
        """Whatever is left when the upstream ended cleanly (an unterminated last event)."""
        rest, self._pending = self._pending, b""
        if rest.strip():
            self._inspect(rest + _SEPARATOR)
        return rest

    def _inspect(self, ready: bytes) -> None:
        self.done = ready.rstrip().endswith(DONE.rstrip())
        if not self.first_token:
            self.first_token = any(carries_token(event.strip()) for event in ready.split(_SEPARATOR))
