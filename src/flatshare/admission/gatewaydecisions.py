"""Routing decisions rebuilt from outside the gateway: each answer's routing headers at its send time.

The gateway names the backend it chose, why, and the one it preferred in `x-flatshare-backend`,
`x-flatshare-reason` and `x-flatshare-preferred`; the client saw the backends' load only through its
polls of `/gateway/backends`. A decision is the headers at the request's send time with the backends as
the last poll before it (the client's view, not necessarily the gateway's at the decision).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from flatshare.admission.cluster import DecisionRecord
from flatshare.runfiles.records import ReplayRecord


def decisions_from(
    records: Sequence[ReplayRecord], heads: dict[str, tuple[str, str, str]], samples: Sequence[dict[str, Any]]
) -> list[DecisionRecord]:
    """A decision per answered request from its routing headers, at its send time, in send order; the
    backends as the last samples at or before it."""
    out = []
    answered = sorted((r for r in records if r.id in heads), key=lambda r: (r.send_s, r.id))
    ordered = sorted(samples, key=lambda s: s["t"])
    seen: dict[str, dict[str, Any]] = {}
    next_sample = 0  # both in time order: one pass over the samples
    for sequence, record in enumerate(answered):
        backend, reason, preferred = heads[record.id]
        while next_sample < len(ordered) and ordered[next_sample]["t"] <= record.send_s:
            sample = ordered[next_sample]
            seen[sample["engine"]] = {k: sample[k] for k in ("kv_usage", "running", "waiting")} | {
                "name": sample["engine"]
            }
            next_sample += 1
        out.append(
            DecisionRecord(
                round(record.send_s, 6),
                record.id,
                sequence,
                record.prompt_tokens,
                record.max_tokens,
                record.cls,
                backend,
                preferred,
                reason,
                tuple(seen.values()),
            )
        )
    return out
