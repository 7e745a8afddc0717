"""`abort-resubmit`: when a voice turn arrives at a backend, abort that backend's agent requests that
have produced no token yet, and resubmit them once the voice turn starts to speak.

The first seed's one policy that "came close": it "aborted agent requests that hadn't produced anything
yet and resubmitted them after the voice turn began to speak" (tail ~2.5 s; the agents' slowest wait for
a first token went from 106 s to 193 s). Here, concretely:
- a voice turn is *pending* on its backend from its arrival until it starts to speak or ends. With
  `resume_on = "first_sentence"` (default) it starts to speak when its first sentence is out
  (`GateRequest.first_sentence_tokens` output tokens; a turn without that number: its first token);
  with `"first_token"` at its first token;
- while any voice turn is pending on a backend, every agent request sent there that has no token yet is
  aborted (the edge closes its upstream stream as a client would; vLLM aborts a request whose client
  disconnects), and agent requests for that backend (aborted or new) are held;
- when no voice turn is pending there any more, the held agent requests are sent again, oldest first;
- only streams are aborted (`GateRequest.abortable`): for a non-streaming request the gateway cannot
  tell whether a token exists;
- `max_aborts_per_request` > 0 stops aborting a request after that many aborts (0: no limit); a request
  held longer than `max_hold_s` is sent anyway and never aborted again (a voice turn that never
  answers does not strand agents).
Counters: `aborts`, `abort_too_late` (the first token came before the abort took effect),
`resubmitted`, `wasted_prompt_tokens` (prompt tokens of aborted attempts: what their prefill could have
cost), `wasted_computed_tokens` (tokens the engine had computed for them, when the edge knows it: the
virtual driver does, a real gateway does not), `max_aborts_one_request`, `hold_expired`.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass

from flatshare.policy.classes import ClassSettings
from flatshare.policy.gates.core import SENT, Decisions, Gate, Send, Tracked, earliest
from flatshare.policy.load import BackendLoad

RESUME_ON = ("first_sentence", "first_token")


@dataclass(frozen=True)
class AbortResubmitSettings(ClassSettings):
    resume_on: str = "first_sentence"
    max_aborts_per_request: int = 0
    max_hold_s: float = 120.0

    def __post_init__(self) -> None:
        if self.resume_on not in RESUME_ON:
            raise ValueError(f"resume_on must be one of {', '.join(RESUME_ON)}, got {self.resume_on!r}")
        if self.max_aborts_per_request < 0:
            raise ValueError(f"max_aborts_per_request must be >= 0, got {self.max_aborts_per_request}")
        if not self.max_hold_s > 0:
            raise ValueError(f"max_hold_s must be > 0, got {self.max_hold_s}")
        super().__post_init__()


class AbortResubmitGate(Gate):
    name = "abort-resubmit"
    COUNTERS = (
        "aborts",
        "abort_too_late",
        "resubmitted",
        "wasted_prompt_tokens",
        "wasted_computed_tokens",
        "max_aborts_one_request",
        "hold_expired",
    )

    def __init__(self, settings: AbortResubmitSettings) -> None:
        super().__init__(settings.classes())
        self.settings = settings
        self.pending_voice: dict[str, set[str]] = defaultdict(set)

    def _on_arrive(self, tracked: Tracked, now: float) -> None:
        if tracked.cls == "voice":
            self.pending_voice[tracked.request.backend].add(tracked.request.id)

    def _on_first_token(self, tracked: Tracked, now: float) -> None:
        self._on_progress(tracked, now)

    def _on_progress(self, tracked: Tracked, now: float) -> None:
        wanted = tracked.request.first_sentence_tokens
        if self.settings.resume_on == "first_token" or wanted is None or tracked.tokens >= wanted:
            self.pending_voice[tracked.request.backend].discard(tracked.request.id)

    def _on_finished(self, tracked: Tracked, now: float) -> None:
        self.pending_voice[tracked.request.backend].discard(tracked.request.id)

    def _on_aborted(self, tracked: Tracked, now: float, computed_tokens: int | None) -> None:
        self.counters["aborts"] += 1
        self.counters["wasted_prompt_tokens"] += tracked.request.prompt_tokens
        self.counters["wasted_computed_tokens"] += computed_tokens or 0
        self.counters["max_aborts_one_request"] = max(self.counters["max_aborts_one_request"], tracked.aborts)
        tracked.marks.add("resubmit")

    def _late_abort(self, tracked: Tracked) -> None:
        self.counters["abort_too_late"] += 1

    def _may_abort(self, tracked: Tracked) -> bool:
        limit = self.settings.max_aborts_per_request
        fresh = "expired" not in tracked.marks
        return tracked.request.abortable and fresh and (limit == 0 or tracked.aborts < limit)

    def _decide(self, now: float, loads: Mapping[str, BackendLoad]) -> Decisions:
        busy = {backend for backend, ids in self.pending_voice.items() if ids}
        aborts = tuple(
            t.request.id
            for t in self.requests.values()
            if t.state == SENT and t.cls == "agent" and t.request.backend in busy and self._may_abort(t)
        )
        sends = []
        for tracked in self.held():
            if tracked.cls == "agent" and tracked.request.backend in busy:
                if now - tracked.held_since_s < self.settings.max_hold_s:
                    continue
                self.counters["hold_expired"] += 1
                tracked.marks.add("expired")  # never aborted again
            if "resubmit" in tracked.marks:
                tracked.marks.discard("resubmit")
                self.counters["resubmitted"] += 1
            sends.append(Send(tracked.request.id, tracked.request.max_tokens))
        return Decisions(tuple(sends), aborts)

    def next_wake_s(self, now: float) -> float | None:
        return earliest(
            (t.held_since_s + self.settings.max_hold_s for t in self.held() if t.cls == "agent"), now
        )
