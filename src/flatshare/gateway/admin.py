"""`GET /gateway/routing` (open) and `PUT /gateway/routing` (admin only): read and switch the routing.

PUT needs `admin_token` set in the gateway's settings (else 404: the admin routes are off) and
`Authorization: Bearer <admin_token>` (else 401). The body `{"policy", "prefer", "thresholds":
{"kv_usage", "input_tokens"}}` (each key optional) is checked like the config file (`switch.apply_change`;
a bad one: 400 naming the key, nothing changes). On success the new routing applies to requests decided
after it, an audit line of kind `routing` records the change (before and after, and the client's
address; never the token), the threshold gauges follow, and the answer is 200 with the new routing.
"""

from __future__ import annotations

import hmac
import time
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from flatshare.errors import InputError
from flatshare.gateway.audit import AuditLog
from flatshare.gateway.errors import GatewayError, answered, unauthorized
from flatshare.gateway.inbound import read_body, read_json
from flatshare.gateway.switch import RoutingConfig, RoutingSwitch, apply_change
from flatshare.gateway.telemetry import GatewayMetrics

ROUTING_KIND = "routing"
ADMIN_BODY_LIMIT = 64 * 1024
"""The most an admin route reads of a body (its bodies are a few keys)."""
ADMIN_BODY_TIMEOUT_S = 10.0
"""The longest an admin route waits for its whole body."""


def routing_json(config: RoutingConfig, admin: bool) -> dict[str, Any]:
    """What GET and PUT answer: the routing, and whether it may be changed here (`admin`)."""
    return config.to_json() | {"admin": admin}


def routing_record(before: RoutingConfig, after: RoutingConfig, client: str | None) -> dict[str, Any]:
    """The audit line of a routing change (`kind` = `routing`; decision lines have no `kind`)."""
    return {
        "kind": ROUTING_KIND,
        "t": round(time.time(), 6),
        "client": client,
        "before": before.to_json(),
        "after": after.to_json(),
    }


def authorized(header: str | None, token: str) -> bool:
    """Whether `Authorization` carries the admin token (compared in constant time)."""
    scheme, _, given = (header or "").partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode(), token.encode())


class RoutingRoutes:
    """The two handlers, over the gateway's switch, audit log and metrics."""

    def __init__(self, switch: RoutingSwitch, token: str, audit: AuditLog, metrics: GatewayMetrics) -> None:
        self.switch = switch
        self.token = token
        self.audit = audit
        self.metrics = metrics

    async def get(self, request: Request) -> Response:
        return JSONResponse(routing_json(self.switch.current.config, bool(self.token)))

    async def put(self, request: Request) -> Response:
        return await answered(self.metrics.error, self._put, request)

    async def _put(self, request: Request) -> Response:
        if not self.token:
            raise GatewayError(
                404,
                "routing changes are off: start the gateway with admin_token (--admin-token or "
                "FLATSHARE_ADMIN_TOKEN) to enable PUT /gateway/routing",
                "bad_request",
                "NotFoundError",
            )
        if not authorized(request.headers.get("authorization"), self.token):
            raise unauthorized("PUT /gateway/routing needs Authorization: Bearer <admin_token>")
        raw = await read_body(request, ADMIN_BODY_LIMIT, ADMIN_BODY_TIMEOUT_S)
        body = read_json(raw, "PUT /gateway/routing") if raw.strip() else {}
        before = self.switch.current.config
        try:
            after = apply_change(before, body)
        except InputError as exc:
            raise GatewayError(400, str(exc), "bad_request") from None
        self.switch.set(after)
        self.metrics.set_thresholds(after.active_thresholds)
        self.audit.write(routing_record(before, after, request.client.host if request.client else None))
        self.audit.flush()
        return JSONResponse(routing_json(after, True))
