"""The shared prefixes of a workload's protected requests: what a server should have computed once before
their traffic (`flatshare warmup`, and the co-location experiment's warm-up).

A request's shared prefix is its first prompt span when that span is a prefix group's text (a system prompt,
`prefix_group_span`): every request of the group starts with it. Each group is warmed once, at its longest
length among the protected requests (a shorter one is a prefix of it).
"""

from __future__ import annotations

from dataclasses import dataclass

from flatshare.workloads.model import Workload
from flatshare.workloads.tokens import Span, prompt_ids

GROUP_PREFIX = "group/"


@dataclass(frozen=True)
class WarmupPrompt:
    """One shared prefix to load: its group name, priority (the most important of its requests') and token
    ids."""

    group: str
    priority: int
    token_ids: tuple[int, ...]


def protected_prefixes(workload: Workload, protect_priority: int = 0) -> tuple[WarmupPrompt, ...]:
    """The shared prefix of every prefix group among requests whose priority is at or below
    `protect_priority`, in the order the groups first appear; empty when none has one."""
    longest: dict[str, tuple[Span, int, int]] = {}
    for request in workload.requests():
        if request.priority > protect_priority or not request.prompt:
            continue
        head = request.prompt[0]
        if not isinstance(head, Span) or not head.key.startswith(GROUP_PREFIX) or head.length == 0:
            continue
        seen = longest.get(head.key)
        if seen is None or head.length > seen[0].length or request.priority < seen[1]:
            span = head if seen is None or head.length > seen[0].length else seen[0]
            priority = request.priority if seen is None else min(seen[1], request.priority)
            longest[head.key] = (span, priority, request.vocab_size)
    return tuple(
        WarmupPrompt(key.removeprefix(GROUP_PREFIX), priority, prompt_ids([span], vocab))
        for key, (span, priority, vocab) in longest.items()
    )
