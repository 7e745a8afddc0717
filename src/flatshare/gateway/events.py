"""`POST /gateway/events`: signals a baseline acts on that the gateway cannot see in the request stream
(docs/baselines-gateway.md). Guarded like `PUT /gateway/routing` (`admin.py`): 404 while the gateway has
no `admin_token` or no baseline, 401 without `Authorization: Bearer <admin_token>`.

Body: `{"kind": "caller_speaking" | "tool_returned", "session": "<id>", "tenant": "<name>",
"backend": "<name>"}`; `backend` is optional: the gate then uses the backend of the session's last request
(sessions are named by the request header `X-Flatshare-Session`). Sessions are per tenant
(`tenants.session_key`): with tenants configured `tenant` is required and names whose session it is; an
open gateway takes it absent (or `"open"`). A bad body: 400 naming the problem. Answer: 200
`{"accepted": true, "baseline": <name>}`.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from flatshare.gateway.admin import ADMIN_BODY_LIMIT, ADMIN_BODY_TIMEOUT_S, authorized
from flatshare.gateway.errors import GatewayError, answered, unauthorized
from flatshare.gateway.gating import GateKeeper
from flatshare.gateway.inbound import read_body, read_json
from flatshare.gateway.telemetry import GatewayMetrics
from flatshare.gateway.tenants import OPEN_TENANT, session_key
from flatshare.policy.gates.core import GateEvent


class EventRoute:
    """The handler, over the gateway's gate keeper (None: no baseline) and admin token."""

    def __init__(
        self, keeper: GateKeeper | None, token: str, metrics: GatewayMetrics, tenants: tuple[str, ...] = ()
    ) -> None:
        self.keeper = keeper
        self.token = token
        self.metrics = metrics
        self.tenants = tenants
        """The configured tenants' names (none: the gateway is open)."""

    async def post(self, request: Request) -> Response:
        return await answered(self.metrics.error, self._post, request)

    async def _post(self, request: Request) -> Response:
        if not self.token or self.keeper is None:
            missing = "admin_token" if not self.token else "a baseline (baseline = ...)"
            raise GatewayError(
                404,
                f"gateway events are off: start the gateway with {missing}",
                "bad_request",
                "NotFoundError",
            )
        if not authorized(request.headers.get("authorization"), self.token):
            raise unauthorized("POST /gateway/events needs Authorization: Bearer <admin_token>")
        body = read_json(
            await read_body(request, ADMIN_BODY_LIMIT, ADMIN_BODY_TIMEOUT_S), "POST /gateway/events"
        )
        if not isinstance(body, dict):
            raise GatewayError(400, "POST /gateway/events: the body must be a JSON object", "bad_json")
        unknown = sorted(set(body) - {"kind", "session", "tenant", "backend"})
        backend = body.get("backend")
        if unknown or not isinstance(body.get("session"), str) or not isinstance(backend, str | None):
            raise GatewayError(
                400,
                "POST /gateway/events: give kind, session (a string), tenant and optionally backend"
                + (f"; unknown key {', '.join(unknown)}" if unknown else ""),
                "bad_request",
            )
        if backend is not None and backend not in self.keeper.pool.by_name:
            raise GatewayError(400, f"POST /gateway/events: unknown backend {backend!r}", "bad_request")
        tenant = self._tenant(body.get("tenant"))
        try:
            if not body["session"]:
                raise ValueError("an event needs a session id")
            event = GateEvent(str(body.get("kind")), session_key(tenant, body["session"]), backend)
        except ValueError as exc:
            raise GatewayError(400, f"POST /gateway/events: {exc}", "bad_request") from None
        self.keeper.event(event)
        return JSONResponse({"accepted": True, "baseline": self.keeper.name})

    def _tenant(self, given: object) -> str:
        """The tenant whose session the event names (module docstring); 400 when it is missing or unknown."""
        if not self.tenants and given in (None, OPEN_TENANT):
            return OPEN_TENANT
        if isinstance(given, str) and given in self.tenants:
            return given
        known = ", ".join(self.tenants) or f"none: the gateway is open (omit tenant or give {OPEN_TENANT!r})"
        what = "needs tenant (sessions are per tenant)" if given is None else f"unknown tenant {given!r}"
        raise GatewayError(400, f"POST /gateway/events: {what}; tenants: {known}", "bad_request")
