"""Scaling a workload's token counts by one factor, so the same experiment fits a small model or a CPU.

`scale_workload(w, 0.05)` turns a 16,000-token agent context into 800 tokens: every prompt span, every
`max_tokens` and every voice reply's `first_sentence_tokens` is multiplied by the factor and rounded
(at least 1 token where the count was at least 1). Spans are scaled one by one and keep their keys, so a
prompt that shared a prefix with another still does (a shorter span of a key is a prefix of a longer one).
Timing is kept: pauses and start offsets are unchanged, and a voice session's speech rate is scaled by
the same factor, so a scaled reply takes as long to speak as the full one did. After scaling, a request is
clipped to `max_model_len` (the scaled engine's) by the workloads' own rule, `clip_to_model_len`.
"""

from __future__ import annotations

import dataclasses

from flatshare.scaling import check_scale, scaled
from flatshare.workloads.model import Workload, WorkloadRequest, clip_to_model_len
from flatshare.workloads.tokens import PromptSpan, head_spans


def _span(span: PromptSpan, factor: float) -> PromptSpan:
    return span.head(scaled(span.length, factor))


def scale_request(r: WorkloadRequest, factor: float, max_model_len: int | None) -> WorkloadRequest:
    """One request with its token counts scaled and clipped to `max_model_len` (None: no limit)."""
    prompt = tuple(s for s in (_span(s, factor) for s in r.prompt) if s.length)
    max_tokens = scaled(r.max_tokens, factor)
    prompt_tokens, max_tokens = clip_to_model_len(sum(s.length for s in prompt), max_tokens, max_model_len)
    first = r.first_sentence_tokens
    return dataclasses.replace(
        r,
        prompt=head_spans(prompt, prompt_tokens),
        max_tokens=max_tokens,
        first_sentence_tokens=None if first is None else min(scaled(first, factor), max_tokens),
    )


def scale_workload(workload: Workload, factor: float, max_model_len: int | None = None) -> Workload:
    """`workload` with every token count scaled by `factor` (module docstring); factor 1 returns it as is."""
    if check_scale(factor) == 1.0:
        return workload
    sessions = tuple(
        dataclasses.replace(
            s,
            requests=tuple(scale_request(r, factor, max_model_len) for r in s.requests),
            speech_tokens_per_s=None if s.speech_tokens_per_s is None else s.speech_tokens_per_s * factor,
        )
        for s in workload.sessions
    )
    return Workload(workload.name, sessions, workload.seed)
