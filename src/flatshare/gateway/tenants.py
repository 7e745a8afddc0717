"""Who is calling, and the priority their request may have.

With tenants configured, every request needs `Authorization: Bearer <key>` with a key of one tenant
(else 401). A request's priority is, in order: its body's `priority` (vLLM's meaning: lower runs first),
else the priority of its class (header `X-Flatshare-Class`, names from the `classes` table; an unknown
name is refused with 400), else 0. It is then clamped to the tenant's `max_priority`: a tenant asking for
a more important (lower) priority than it may use is forwarded with `max_priority`, never refused, and
the audit log records both numbers. No tenant can raise its own priority.

Without tenants the gateway runs open: no key is needed and priorities pass unchanged (it says so at
start-up).

Names a client chooses are scoped by its tenant, so no tenant can reach another's state by naming it: a
session (header `X-Flatshare-Session`, at most `MAX_SESSION_CHARS` printable characters, else 400) is
known to the gateway as `<tenant>/<session>` (`session_key`), and `POST /gateway/events` names the tenant
whose session it means (`events.py`). Tenant names cannot hold `/`, so two tenants' keys never meet.
"""

from __future__ import annotations

import hmac
from collections.abc import Mapping
from dataclasses import dataclass

from flatshare.gateway.config import GatewayConfig, TenantConfig
from flatshare.gateway.errors import GatewayError, unauthorized

CLASS_HEADER = "x-flatshare-class"
SESSION_HEADER = "x-flatshare-session"
MAX_SESSION_CHARS = 256
OPEN_TENANT = "open"
DEFAULT_CLASS = "default"


@dataclass(frozen=True)
class CallerGrant:
    """What `Tenants.admit` grants a request: its caller (tenant), class, and the priority it goes on with."""

    tenant: str
    cls: str
    requested_priority: int | None
    priority: int
    session: str | None = None
    """The request's session, scoped by tenant (`session_key`); None without the header."""

    @property
    def clamped(self) -> bool:
        return self.requested_priority is not None and self.requested_priority != self.priority


class Tenants:
    """API key -> tenant, and the priority rule (module docstring)."""

    def __init__(self, config: GatewayConfig) -> None:
        self.open = config.open
        self.classes = dict(config.classes)
        self._keys: list[tuple[bytes, TenantConfig]] = [
            (key.encode(), t) for t in config.tenants for key in t.api_keys
        ]

    def _match(self, authorization: str | None) -> TenantConfig | None:
        """The tenant whose key `authorization` bears: compared with every key in constant time (no
        early exit, no dict lookup), so the answer's timing tells nothing about the keys."""
        scheme, _, given = (authorization or "").partition(" ")
        key = given.strip().encode("utf-8", "replace")
        found: TenantConfig | None = None
        for candidate, tenant in self._keys:
            if hmac.compare_digest(key, candidate) and scheme.lower() == "bearer":
                found = tenant
        return found

    def known(self, authorization: str | None) -> bool:
        """Whether `authorization` bears a tenant's key."""
        return self._match(authorization) is not None

    def tenant(self, authorization: str | None) -> TenantConfig | None:
        """The calling tenant (None when open); 401 without a known key."""
        if self.open:
            return None
        tenant = self._match(authorization)
        if tenant is None:
            raise unauthorized("a valid API key is required: send 'Authorization: Bearer <key>'")
        return tenant

    def admit(self, headers: Mapping[str, str], body_priority: object) -> CallerGrant:
        tenant = self.tenant(headers.get("authorization"))
        cls = headers.get(CLASS_HEADER) or DEFAULT_CLASS
        if cls != DEFAULT_CLASS and cls not in self.classes:
            known = ", ".join(sorted(self.classes)) or "none configured"
            raise GatewayError(
                400, f"unknown class {cls!r} in {CLASS_HEADER} (known: {known})", "bad_request"
            )
        if body_priority is not None and (
            not isinstance(body_priority, int) or isinstance(body_priority, bool)
        ):
            raise GatewayError(
                400, f"'priority' must be an integer, got {body_priority!r}", "bad_request", param="priority"
            )
        requested = body_priority if body_priority is not None else self.classes.get(cls)
        priority = requested if requested is not None else 0
        if tenant is not None:
            priority = max(priority, tenant.max_priority)
        name = tenant.name if tenant else OPEN_TENANT
        return CallerGrant(name, cls, requested, priority, _session(name, headers.get(SESSION_HEADER)))


def session_key(tenant: str, session: str) -> str:
    """How the gateway knows `tenant`'s session `session` (module docstring)."""
    return f"{tenant}/{session}"


def _session(tenant: str, given: str | None) -> str | None:
    if not given:
        return None
    if len(given) > MAX_SESSION_CHARS or not given.isprintable():
        raise GatewayError(
            400,
            f"{SESSION_HEADER} must be at most {MAX_SESSION_CHARS} printable characters",
            "bad_request",
        )
    return session_key(tenant, given)
