"""Reading an OpenAI-style completion stream: server-sent events, and how many tokens each carries.

The one client-side reader of streamed completions (the replay driver's `flatshare.replay.stream` and
the fidelity probes' `flatshare.fidelity.probes` both use it). The gateway's `flatshare.gateway.sse`
differs on purpose: it relays upstream bytes unchanged, whole events at a time, and only peeks at them.

`StreamReader.feed(bytes, t)` is the loop both clients share: split, decode JSON, tally, note `[DONE]`.
Servers that write such streams (serve-sim, the gateway's own events) frame them with `encode_event` and
end them with `DONE_EVENT`.
`EventScanner` cuts received bytes at event ends (the spec's CR, LF and CRLF line ends; linear time,
a bound on an event's size) and `event_data` reads the `data` of whole events; the gateway's relay
uses both. `SseSplitter` turns received bytes into the `data:` payloads of complete events (events end
with a blank line; a payload may arrive split over several reads). `StreamTally` counts output tokens:

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
import re
from dataclasses import dataclass, field
from typing import Any

# What flatshare's clients ask of a vLLM stream: usage on every chunk, so tokens are counted exactly.
STREAM_OPTIONS = {"include_usage": True, "continuous_usage_stats": True}
DONE = "[DONE]"
DONE_EVENT = b"data: [DONE]\n\n"


def encode_event(data: Any) -> bytes:
    """One server-sent event carrying `data` as compact JSON (`data: {...}` and a blank line)."""
    return b"data: " + json.dumps(data, separators=(",", ":")).encode() + b"\n\n"


class EventTooLarge(ValueError):
    """An event grew past the scanner's `max_event_bytes` without ending (a stream with no blank line)."""


MAX_EVENT_BYTES = 16 * 1024 * 1024
"""The default bound on one event of a client-side reader (the gateway sets its own, a setting)."""
_LINE_END = re.compile(rb"\r\n|\r|\n")


class EventScanner:
    """Cuts a byte stream at event ends, incrementally (the spec's framing, not just `\\n\\n`).

    The SSE spec ends a line with CRLF, LF or CR, and an event with a blank line, so `\\r\\n\\r\\n` (what
    sse-starlette writes) and `\\r\\r` end events as `\\n\\n` does. `feed(chunk)` returns the bytes of every
    event completed so far (unchanged, possibly b""), keeping the rest. Each byte is looked at once: the
    scan resumes where it stopped, and a CR that ends a chunk ends its line at once (an LF that starts
    the next chunk is taken as the rest of that CRLF, not as a second line end). An unfinished event longer than `max_event_bytes` raises `EventTooLarge`, so a
    stream without blank lines costs bounded memory and linear time.
    """

    def __init__(self, max_event_bytes: int = MAX_EVENT_BYTES) -> None:
        self.max_event_bytes = max_event_bytes
        self._buffer = bytearray()
        self._scanned = 0  # bytes of the buffer already looked at
        self._line_start = 0  # where the line being read begins
        self._after_cr = False  # the last byte scanned was a CR: an LF next is the rest of its CRLF

    def feed(self, chunk: bytes) -> bytes:
        """The complete events now available (b"" when none); raises `EventTooLarge` (class docstring)."""
        buffer = self._buffer
        buffer += chunk
        start = self._scanned
        if self._after_cr and start < len(buffer):
            self._after_cr = False
            if buffer[start] == 0x0A:  # the LF of a CRLF split between chunks: not a second line end
                start += 1
                self._line_start = start
        cut = 0
        for match in _LINE_END.finditer(buffer, start):
            if match.start() == self._line_start:  # an empty line: the event before it is complete
                cut = match.end()
            self._line_start = match.end()
        if len(buffer) > start:
            self._after_cr = buffer.endswith(b"\r") or (self._after_cr and start == len(buffer))
        self._scanned = len(buffer)
        ready = b""
        if cut:
            ready = bytes(buffer[:cut])
            del buffer[:cut]
            self._scanned -= cut
            self._line_start -= cut
        if len(buffer) > self.max_event_bytes:
            raise EventTooLarge(f"an event grew past {self.max_event_bytes} bytes without ending")
        return ready

    def flush(self) -> bytes:
        """Whatever is left (an unterminated last event), emptying the scanner."""
        rest = bytes(self._buffer)
        self._buffer.clear()
        self._scanned = self._line_start = 0
        self._after_cr = False
        return rest

    @property
    def pending(self) -> bool:
        """Whether bytes of an unfinished event are buffered (blank lines aside)."""
        return bool(self._buffer.strip())


def event_data(events: bytes) -> list[bytes]:
    """The `data` of each event in `events` (whole events, as `EventScanner.feed` returns them), per the
    spec: the values of its `data:` lines (one leading space dropped) joined by LF. Events without a
    `data` line (comments, `retry:`) are skipped."""
    payloads: list[bytes] = []
    lines: list[bytes] | None = None
    for line in _LINE_END.split(events):
        if not line:
            if lines is not None:
                payloads.append(b"\n".join(lines))
            lines = None
        elif line.startswith(b"data"):
            name, _, value = line.partition(b":")
            if name == b"data":
                value = value[1:] if value.startswith(b" ") else value
                lines = [*lines, value] if lines is not None else [value]
    if lines is not None:
        payloads.append(b"\n".join(lines))
    return payloads


class SseSplitter:
    """Incremental SSE parser: `feed(bytes)` returns the `data` payloads of the events it completed."""

    def __init__(self, max_event_bytes: int = MAX_EVENT_BYTES) -> None:
        self._scanner = EventScanner(max_event_bytes)

    def feed(self, data: bytes) -> list[str]:
        """Payloads of the events completed by `data`; `EventTooLarge` (a ValueError) past the bound."""
        return [p.decode("utf-8", errors="replace") for p in event_data(self._scanner.feed(data))]

    @property
    def pending(self) -> bool:
        """Whether bytes of an unfinished event are buffered."""
        return self._scanner.pending


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
