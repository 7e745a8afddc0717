"""The workloads endpoint mode sends: every run's prompts salted, and the shorts alone one after another.

Real backends keep their prefix caches from run to run, where the simulated mode starts every run on
fresh engines. So every run's prompts are salted (`salted`): each prompt span's key gets the run's own
prefix (an experiment nonce, the workload, the condition and the seed), which keeps the sharing within
a run (a conversation's turns) and makes nothing cached by an earlier run or experiment. Real-text
prompts (ShareGPT) get one salt token in front instead.
"""

from __future__ import annotations

import dataclasses

from flatshare.workloads.model import Session, Workload, WorkloadRequest
from flatshare.workloads.tokens import DEFAULT_VOCAB, Span


def salted(workload: Workload, salt: str, vocab_size: int = DEFAULT_VOCAB) -> Workload:
    """The workload with prompts no earlier run shares (module docstring), their token ids below
    `vocab_size` (the backends' model's vocabulary)."""

    def prompt(request: WorkloadRequest) -> WorkloadRequest:
        spans = request.prompt
        if all(isinstance(s, Span) for s in spans):
            return dataclasses.replace(
                request,
                prompt=tuple(Span(f"{salt}/{s.key}", s.length) for s in spans if isinstance(s, Span)),
                vocab_size=vocab_size,
            )
        return dataclasses.replace(request, prompt=(Span(f"{salt}/text", 1), *spans), vocab_size=vocab_size)

    sessions = tuple(
        dataclasses.replace(s, requests=tuple(prompt(r) for r in s.requests)) for s in workload.sessions
    )
    return dataclasses.replace(workload, sessions=sessions)


def alone_workload(workload: Workload, pause_s: float) -> Workload:
    """The shorts of `workload` one after another in one session, `pause_s` after each reply."""
    shorts = [r for r in workload.requests() if r.cls == "short"]
    spaced = tuple(
        dataclasses.replace(r, session_id="alone", pause_before_s=0.0 if i == 0 else pause_s, arrival_s=None)
        for i, r in enumerate(shorts)
    )
    return Workload(f"{workload.name}-alone", (Session("alone", "short", 0.0, spaced),), workload.seed)
