"""The workload model: sessions of dependent requests, the same for the simulator and a real endpoint.

A `Workload` is a set of `Session`s. A session's requests run one after another: request 0 is issued at the
session's `start_s`; request k+1 is issued when request k's reply is complete (for a voice session: when the
reply has been spoken) plus request k+1's `pause_before_s`. `Session.issue_s` is that rule, so every driver
applies it the same way. A trace of independent arrivals is a workload of one-request sessions
(`Workload.to_open_loop`).

Prompts are stored as spans (see `flatshare.workloads.tokens`), not as token ids: a coding-agent workload
resends 10k-90k-token contexts thousands of times, which as Python tuples would take gigabytes.
`WorkloadRequest.prompt_token_ids` builds the ids when they are needed, deterministically.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from dataclasses import dataclass, replace

from flatshare.workloads.tokens import DEFAULT_VOCAB, PromptSpan, check_vocab, prompt_ids, prompt_length

CLASS_PATTERN = re.compile(r"[a-z][a-z0-9_-]*")


def _check_int(name: str, value: object, low: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")


def _check_seconds(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        raise ValueError(f"{name} must be a finite number of seconds >= 0, got {value!r}")


def clip_to_model_len(prompt_tokens: int, max_tokens: int, max_model_len: int | None) -> tuple[int, int]:
    """Fit a request into `max_model_len` tokens (prompt + output); returns `(prompt_tokens, max_tokens)`.

    The rule: first `max_tokens` is cut to `max_model_len - 1` at most, then the prompt keeps its FIRST
    `max_model_len - max_tokens` tokens. Keeping the head keeps shared prefixes (system prompt, earlier turns)
    cacheable. `None` means no limit.
    """
    if max_model_len is None:
        return prompt_tokens, max_tokens
    _check_int("max_model_len", max_model_len, 2)
    max_tokens = min(max_tokens, max_model_len - 1)
    return min(prompt_tokens, max_model_len - max_tokens), max_tokens


@dataclass(frozen=True)
class WorkloadRequest:
    """One request: a prompt, an output budget, and when it goes out relative to its session.

    `priority` has vLLM's meaning (lower is more important). `pause_before_s`: for the first request of a
    session, the session's start offset `start_s`; otherwise the pause after the previous request's reply
    (think time, tool time, or the caller's speech). `first_sentence_tokens`: for voice replies, how many
    output tokens the first speakable sentence takes. `arrival_s`: the recorded or nominal absolute issue
    time (trace time, or the generator's estimate), used only by `Workload.to_open_loop`. `text`: the
    prompt as text, when there is one (ShareGPT).
    """

    id: str
    session_id: str
    cls: str
    priority: int
    prompt: tuple[PromptSpan, ...]
    max_tokens: int
    pause_before_s: float = 0.0
    first_sentence_tokens: int | None = None
    text: str | None = None
    arrival_s: float | None = None
    vocab_size: int = DEFAULT_VOCAB

    def __post_init__(self) -> None:
        if not self.id or not self.session_id:
            raise ValueError(f"request and session ids must not be empty: {self.id!r}/{self.session_id!r}")
        if not CLASS_PATTERN.fullmatch(self.cls):
            raise ValueError(f"request {self.id}: class must match {CLASS_PATTERN.pattern}, got {self.cls!r}")
        if isinstance(self.priority, bool) or not isinstance(self.priority, int):
            raise ValueError(f"request {self.id}: priority must be an integer, got {self.priority!r}")
        if self.prompt_tokens < 1:
            raise ValueError(f"request {self.id}: the prompt must hold at least one token")
        _check_int(f"request {self.id}: max_tokens", self.max_tokens, 1)
        _check_seconds(f"request {self.id}: pause_before_s", self.pause_before_s)
        if self.first_sentence_tokens is not None:
            _check_int(f"request {self.id}: first_sentence_tokens", self.first_sentence_tokens, 1)
            if self.first_sentence_tokens > self.max_tokens:
                raise ValueError(f"request {self.id}: first_sentence_tokens exceeds max_tokens")
        if self.arrival_s is not None:
            _check_seconds(f"request {self.id}: arrival_s", self.arrival_s)
        check_vocab(self.vocab_size)

    @property
    def prompt_tokens(self) -> int:
        """Number of prompt tokens (cheap: no ids are built)."""
        return prompt_length(self.prompt)

    @property
    def prompt_token_ids(self) -> tuple[int, ...]:
        """The prompt's token ids, built on each access (a few ms for 90k tokens); equal spans, equal ids."""
        return prompt_ids(self.prompt, self.vocab_size)


@dataclass(frozen=True)
class Session:
    """Dependent requests of one caller or agent; see the module docstring for when each is issued.

    `speech_tokens_per_s`: set for voice sessions, whose replies are spoken. The caller then starts speaking
    again only when the reply has been spoken: speech starts when the first sentence is ready and takes
    `output tokens / speech_tokens_per_s` seconds (and cannot end before the reply is complete). The next
    request's `pause_before_s` is the caller's speech. `None`: the reply is not spoken (agents, chat).
    """

    id: str
    cls: str
    start_s: float
    requests: tuple[WorkloadRequest, ...]
    speech_tokens_per_s: float | None = None

    def __post_init__(self) -> None:
        _check_seconds(f"session {self.id}: start_s", self.start_s)
        if not self.requests:
            raise ValueError(f"session {self.id} has no requests")
        for r in self.requests:
            if r.session_id != self.id:
                raise ValueError(f"request {r.id} names session {r.session_id!r}, it is in {self.id!r}")
        if not math.isclose(self.requests[0].pause_before_s, self.start_s, abs_tol=1e-9):
            raise ValueError(f"session {self.id}: the first request's pause_before_s must equal start_s")
        if self.speech_tokens_per_s is not None and not self.speech_tokens_per_s > 0:
            raise ValueError(f"session {self.id}: speech_tokens_per_s must be > 0")

    def issue_s(
        self,
        k: int,
        prev_done_s: float = 0.0,
        prev_output_tokens: int = 0,
        prev_first_sentence_s: float | None = None,
    ) -> float:
        """When request `k` goes out, given when request k-1's reply completed (and, for voice, when its
        first sentence was ready and how many tokens it had). A failed reply counts as completed when the
        failure was seen, with the tokens that arrived."""
        if k == 0:
            return self.start_s
        free_s = prev_done_s
        if self.speech_tokens_per_s is not None:
            speech_start = prev_done_s if prev_first_sentence_s is None else prev_first_sentence_s
            free_s = max(prev_done_s, speech_start + prev_output_tokens / self.speech_tokens_per_s)
        return free_s + self.requests[k].pause_before_s


@dataclass(frozen=True)
class Workload:
    """A named set of sessions, with the seed it was drawn with (None for a trace read as is)."""

    name: str
    sessions: tuple[Session, ...]
    seed: int | None = None

    def __post_init__(self) -> None:
        if not self.sessions:
            raise ValueError(f"workload {self.name} has no sessions")
        _unique("session", (s.id for s in self.sessions))
        _unique("request", (r.id for r in self.requests()))

    @property
    def n_requests(self) -> int:
        return sum(len(s.requests) for s in self.sessions)

    def requests(self) -> Iterator[WorkloadRequest]:
        """Every request, session by session."""
        for s in self.sessions:
            yield from s.requests

    def to_open_loop(self) -> Workload:
        """Each request as its own session, issued at its `arrival_s`, in arrival order."""
        missing = [r.id for r in self.requests() if r.arrival_s is None]
        if missing:
            raise ValueError(
                f"workload {self.name}: {len(missing)} requests lack arrival_s, e.g. {missing[0]}"
            )
        ordered = sorted(self.requests(), key=lambda r: (r.arrival_s, r.id))
        sessions = tuple(_alone(r) for r in ordered)
        return Workload(f"{self.name}-open", sessions, self.seed)


def merge(name: str, parts: list[Workload], seed: int | None = None) -> Workload:
    """One workload holding the sessions of all `parts` (their ids must not clash)."""
    return Workload(name, tuple(s for w in parts for s in w.sessions), seed)


def _alone(r: WorkloadRequest) -> Session:
    start = r.arrival_s if r.arrival_s is not None else 0.0
    return Session(r.id, r.cls, start, (replace(r, session_id=r.id, pause_before_s=start),))


def _unique(kind: str, ids: Iterator[str]) -> None:
    seen: set[str] = set()
    for i in ids:
        if i in seen:
            raise ValueError(f"duplicate {kind} id {i!r}")
        seen.add(i)
