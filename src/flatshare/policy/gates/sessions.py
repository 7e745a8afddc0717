"""Which backend each session's last request went to, bounded in time and in count.

Session ids come from clients (the gateway's `X-Flatshare-Session` header, scoped by tenant before they
get here), so the map must not grow with whatever a client sends: an entry is forgotten `ttl_s` seconds
after its session's last request, and past `most` sessions the least recently used is dropped first.
Pure: the caller passes the time.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

DEFAULT_TTL_S = 600.0
DEFAULT_MOST = 50_000


@dataclass(frozen=True)
class SessionLimits:
    """How long a session's backend is remembered after its last request, and how many are kept."""

    ttl_s: float = DEFAULT_TTL_S
    most: int = DEFAULT_MOST

    def __post_init__(self) -> None:
        if not self.ttl_s > 0:
            raise ValueError(f"session_ttl_s must be > 0, got {self.ttl_s}")
        if self.most < 1:
            raise ValueError(f"max_sessions must be >= 1, got {self.most}")


class SessionMap:
    """session id -> backend, least recently used first (module docstring)."""

    def __init__(self, limits: SessionLimits | None = None) -> None:
        self.limits = limits or SessionLimits()
        self._entries: OrderedDict[str, tuple[str, float]] = OrderedDict()
        self.expired = 0
        self.evicted = 0

    def __len__(self) -> int:
        return len(self._entries)

    def set(self, session: str, backend: str, now: float) -> None:
        self._entries[session] = (backend, now)
        self._entries.move_to_end(session)
        self._forget(now)

    def get(self, session: str, now: float) -> str | None:
        self._forget(now)
        entry = self._entries.get(session)
        return entry[0] if entry is not None else None

    def _forget(self, now: float) -> None:
        entries = self._entries
        while entries:
            session, (_, seen) = next(iter(entries.items()))
            if now - seen < self.limits.ttl_s:
                break
            del entries[session]
            self.expired += 1
        while len(entries) > self.limits.most:
            entries.popitem(last=False)
            self.evicted += 1
