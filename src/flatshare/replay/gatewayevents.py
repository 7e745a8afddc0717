"""Telling a flatshare gateway's baseline, during a wall-clock replay, what it cannot see in the request
stream: callers starting to speak and tools coming back.

Each is one `POST /gateway/events` (`flatshare.gateway.events`, admin token): `caller_speaking` when a
voice session's caller starts speaking, `tool_returned` when an agent session's tool call comes back, the
events the virtual-time driver gives a gate (`flatshare.replay.virtual_gate`), at the same moments
(`flatshare.replay.wallclock` says when).

An event that fails (the gateway down, a refusal) is counted in `RunStats.event_errors`, never raised: the
replay goes on and the run's facts say how many were lost.
"""

from __future__ import annotations

from dataclasses import dataclass

import httpx

from flatshare.replay.ledger import RunStats

CALLER_SPEAKING = "caller_speaking"
TOOL_RETURNED = "tool_returned"


@dataclass(frozen=True)
class GatewayEvents:
    """Where the events go: the gateway's base URL and its admin token."""

    url: str
    admin_token: str

    def __post_init__(self) -> None:
        if not self.admin_token:
            raise ValueError("gateway events need the gateway's admin token")

    async def post(self, client: httpx.AsyncClient, kind: str, session_id: str, stats: RunStats) -> None:
        """Send one event; count it in `stats` (`events_sent`, or `event_errors` when it failed)."""
        try:
            response = await client.post(
                f"{self.url}/gateway/events",
                json={"kind": kind, "session": session_id},
                headers={"Authorization": f"Bearer {self.admin_token}"},
            )
        except httpx.HTTPError:
            stats.event_errors += 1
            return
        if response.status_code == 200:
            stats.events_sent += 1
        else:
            stats.event_errors += 1
