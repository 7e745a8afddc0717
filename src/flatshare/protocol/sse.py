"""Reading an OpenAI-style completion stream: server-sent events, and how many tokens each carries.

The one client-side reader of streamed completions (the replay driver's `flatshare.replay.stream` and
the fidelity probes' `flatshare.fidelity.probes` both use it). The gateway's `flatshare.gateway.sse`
differs on purpose: it relays upstream bytes unchanged, whole events at a time, and only peeks at them.

`StreamReader.feed(bytes, t)` is the loop both clients share: split, decode JSON, tally, note `[DONE]`.
Servers that write such streams (serve-sim, the gateway's own events) frame them with `encode_event` and
end them with `DONE_EVENT`.
`SseSplitter` turns received bytes into the `data:` payloads of complete events (events end with a
blank line; a payload may arrive split over several reads). `StreamTally` counts output tokens:

- A chunk whose `usage.completion_tokens` is set (vLLM with `stream_options.continuous_usage_stats`)
  carries `completion_tokens - tokens counted so far` tokens: exact, even for chunks that hold several
  tokens or none that decode to text (vLLM sends such empty-text chunks).
- Otherwise a chunk with a choice carries one token if its text is not empty (serve-sim, and servers
  that stream a token a chunk without usage).
- A final usage-only chunk (`choices: []`) that counts more tokens than were seen adds the missing
  ones at the time of the last token-bearing chunk (they were in it or earlier; their times are not
  known better than that).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

# What flatshare's clients ask of a vLLM stream: usage on every chunk, so tokens are counted exactly.
STREAM_OPTIONS = {"include_usage": True, "continuous_usage_stats": True}
DONE = "[DONE]"
DONE_EVENT = b"data: [DONE]\n\n"


def encode_event(data: Any) -> bytes:
    """One server-sent event carrying `data` as compact JSON (`data: {...}` and a blank line)."""
    return b"data: " + json.dumps(data, separators=(",", ":")).encode() + b"\n\n"


class SseSplitter:
    """Incremental SSE parser: `feed(bytes)` returns the `data` payloads of the events it completed."""

    def __init__(self) -> None:
        self._buffer = b""

    def feed(self, data: bytes) -> list[str]:
        self._buffer += data.replace(b"\r\n", b"\n")
        *events, self._buffer = self._buffer.split(b"\n\n")
        payloads = []
        for event in events:
            lines = [line[5:].lstrip(b" ") for line in event.split(b"\n") if line.startswith(b"data:")]
            if lines:
                payloads.append(b"\n".join(lines).decode("utf-8", errors="replace"))
        return payloads

    @property
    def pending(self) -> bool:
        """Whether bytes of an unfinished event are buffered."""
        return bool(self._buffer.strip())


@dataclass
class StreamTally:
    """What one response stream has delivered so far (see the module docstring for the counting rule).

    `token_times_s`: one entry per output token; `end_s`: when the chunk with the finish reason (or
    the last token) arrived; `error`: an `{"error": ...}` chunk's message, with its `error_code`.
    """

    token_times_s: list[float] = field(default_factory=list)
    finish_reason: str | None = None
    end_s: float | None = None
    done: bool = False
    error: str | None = None
    error_code: int | None = None
    _last_token_s: float | None = None

    def add(self, chunk: Any, t: float) -> None:
        """Account for one decoded chunk that arrived at `t`."""
        if not isinstance(chunk, dict):
            self._fail(f"a stream chunk is not a JSON object: {chunk!r:.200}")
            return
        if "error" in chunk:
            self._error(chunk["error"])
            return
        choices = chunk.get("choices") or []
        counted = _usage_tokens(chunk)
        if not choices:
            if counted is not None and counted > len(self.token_times_s):
                missing = counted - len(self.token_times_s)
                at = self._last_token_s if self._last_token_s is not None else t
                self.token_times_s.extend([at] * missing)
            return
        choice = choices[0] if isinstance(choices[0], dict) else {}
        if counted is not None:
            n = max(0, counted - len(self.token_times_s))
        else:
            n = 1 if choice.get("text") or (choice.get("delta") or {}).get("content") else 0
        if n:
            self.token_times_s.extend([t] * n)
            self._last_token_s = t
            self.end_s = t
        reason = choice.get("finish_reason")
        if reason is not None:
            self.finish_reason = str(reason)
            self.end_s = t

    def _error(self, error: Any) -> None:
        if self.error is not None:
            return
        if isinstance(error, dict):
            code = error.get("code")
            self.error_code = code if isinstance(code, int) and not isinstance(code, bool) else None
            self._fail(str(error.get("message") or error))
        else:
            self._fail(str(error))

    def _fail(self, message: str) -> None:
        if self.error is None:
            self.error = message


def _usage_tokens(chunk: dict[str, Any]) -> int | None:
    usage = chunk.get("usage")
    if not isinstance(usage, dict):
        return None
    value = usage.get("completion_tokens")
    return value if isinstance(value, int) and not isinstance(value, bool) else None


class StreamReader:
    """Received bytes of one completion stream into its `tally` (`SseSplitter` + `StreamTally`)."""

    def __init__(self, tally: StreamTally | None = None) -> None:
        self.tally = tally if tally is not None else StreamTally()
        self.splitter = SseSplitter()

    def feed(self, data: bytes, t: float) -> None:
        """Account for bytes that arrived at `t`; ValueError when an event's data is not JSON."""
        for payload in self.splitter.feed(data):
            if payload == DONE:
                self.tally.done = True
            else:
                self.tally.add(json.loads(payload), t)
