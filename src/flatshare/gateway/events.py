"""`POST /gateway/events`: signals a baseline acts on that the gateway cannot see in the request stream
(docs/baselines-gateway.md). Guarded like `PUT /gateway/routing` (`admin.py`): 404 while the gateway has
no `admin_token` or no baseline, 401 without `Authorization: Bearer <admin_token>`.

Body: `{"kind": "caller_speaking" | "tool_returned", "session": "<id>", "backend": "<name>"}`;
`backend` is optional: the gate then uses the backend of the session's last request (sessions are named
by the request header `X-Flatshare-Session`). A bad body: 400 naming the problem. Answer: 200
`{"accepted": true, "baseline": <name>}`.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from flatshare.gateway.admin import ADMIN_BODY_LIMIT, authorized
from flatshare.gateway.baselines.core import GateEvent
from flatshare.gateway.errors import GatewayError, answered, unauthorized
from flatshare.gateway.gating import GateKeeper
from flatshare.gateway.inbound import read_body, read_json
from flatshare.gateway.telemetry import GatewayMetrics


class EventRoute:
    """The handler, over the gateway's gate keeper (None: no baseline) and admin token."""

    def __init__(self, keeper: GateKeeper | None, token: str, metrics: GatewayMetrics) -> None:
        self.keeper = keeper
        self.token = token
        self.metrics = metrics

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
        body = read_json(await read_body(request, ADMIN_BODY_LIMIT), "POST /gateway/events")
        if not isinstance(body, dict):
            raise GatewayError(400, "POST /gateway/events: the body must be a JSON object", "bad_json")
        unknown = sorted(set(body) - {"kind", "session", "backend"})
        backend = body.get("backend")
        if unknown or not isinstance(body.get("session"), str) or not isinstance(backend, str | None):
            raise GatewayError(
                400,
                "POST /gateway/events: give kind, session (a string) and optionally backend"
                + (f"; unknown key {', '.join(unknown)}" if unknown else ""),
                "bad_request",
            )
        if backend is not None and backend not in self.keeper.pool.by_name:
            raise GatewayError(400, f"POST /gateway/events: unknown backend {backend!r}", "bad_request")
        try:
            event = GateEvent(str(body.get("kind")), body["session"], backend)
        except ValueError as exc:
            raise GatewayError(400, f"POST /gateway/events: {exc}", "bad_request") from None
        self.keeper.event(event)
        return JSONResponse({"accepted": True, "baseline": self.keeper.name})
