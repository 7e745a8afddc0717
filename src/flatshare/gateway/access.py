"""Who may read what: the gateway's security model for its read routes (docs/gateway.md, "Security model").

Open (no tenants): anyone may read everything; only the admin routes need the admin token. With tenants:

- `/health`: anyone (a load balancer's probe; it says only up or down).
- `/v1/models` (`TENANT`): a tenant's API key, or the admin token.
- `/metrics` (`METRICS`): the admin token; anyone when `expose_metrics` or `expose_status` is set (a
  Prometheus scrape on a trusted network; the page holds backend names and counts, never URLs or keys).
- `/gateway/backends`, `GET /gateway/routing` (`STATUS`): the admin token; anyone when `expose_status`
  is set. They show backend URLs and last errors.
- `PUT /gateway/routing`, `POST /gateway/events`: the admin token, always (`admin.py`, `events.py`).
- `/v1/completions`, `/v1/chat/completions`: a tenant's key (`tenants.py`).

A refusal is a 401 in the OpenAI error shape, counted as `unauthorized`; keys are compared in constant time.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from enum import Enum

from starlette.requests import Request
from starlette.responses import Response

from flatshare.gateway.admin import authorized
from flatshare.gateway.config import GatewayConfig
from flatshare.gateway.errors import unauthorized
from flatshare.gateway.telemetry import GatewayMetrics
from flatshare.gateway.tenants import Tenants

Handler = Callable[[Request], Awaitable[Response]]


class Reader(Enum):
    """What a read route needs (module docstring)."""

    TENANT = "a tenant's API key or the admin token"
    METRICS = "the admin token (or expose_metrics = true)"
    STATUS = "the admin token (or expose_status = true)"


class Access:
    """Guards the read routes of one gateway."""

    def __init__(self, config: GatewayConfig, tenants: Tenants, metrics: GatewayMetrics) -> None:
        self.config = config
        self.tenants = tenants
        self.metrics = metrics

    def allows(self, reader: Reader, authorization: str | None) -> bool:
        config = self.config
        if config.open:
            return True
        if config.admin_token and authorized(authorization, config.admin_token):
            return True
        if reader is Reader.TENANT:
            return self.tenants.known(authorization)
        if reader is Reader.METRICS:
            return config.expose_metrics or config.expose_status
        return config.expose_status

    def guard(self, reader: Reader, handler: Handler) -> Handler:
        """`handler`, answering 401 to a caller `reader` does not allow."""

        async def guarded(request: Request) -> Response:
            if self.allows(reader, request.headers.get("authorization")):
                return await handler(request)
            error = unauthorized(
                f"{request.method} {request.url.path} needs Authorization: Bearer <key> with {reader.value}"
            )
            self.metrics.error(error.kind)
            return error.response()

        return guarded
