"""The gateway's ASGI app (Starlette): OpenAI-compatible routes in front of several vLLM servers.

Routes: `POST /v1/completions`, `POST /v1/chat/completions` (proxied, `proxy.py`), `GET /v1/models`
(the union of the healthy backends' models), `GET /health` (200 while any backend is healthy, else
503), `GET /metrics` (the gateway's own, `metrics.py`), `GET /gateway/backends` (every backend's
snapshot as JSON, for operators), `GET` and `PUT /gateway/routing` (the routing in force; switching it
needs the admin token, `admin.py`), `POST /gateway/events` (signals for a baseline, admin token,
`events.py`). Who may read which: `access.py` (docs/gateway.md, "Security model").

The lifespan warns when the gateway runs open, starts one poller per backend and waits for their first
round (at most about three poll timeouts) so the first requests see real readings, then stops them and closes
the HTTP clients and the audit log at shutdown, after uvicorn has drained the in-flight streams.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from flatshare.gateway.access import Access, Reader
from flatshare.gateway.admin import RoutingRoutes
from flatshare.gateway.audit import AuditLog, backend_fields
from flatshare.gateway.backends import BackendPool
from flatshare.gateway.config import GatewayConfig
from flatshare.gateway.events import EventRoute
from flatshare.gateway.gating import GateKeeper
from flatshare.gateway.inbound import ClientGone
from flatshare.gateway.input_count import TokenCounter
from flatshare.gateway.membership import Membership
from flatshare.gateway.proxy import Proxy, ProxyParts
from flatshare.gateway.switch import RoutingConfig, RoutingSwitch
from flatshare.gateway.telemetry import CONTENT_TYPE, GatewayMetrics
from flatshare.gateway.tenants import Tenants
from flatshare.gateway.upstream import auth_headers, resolve_client
from flatshare.gateway.upstream_make import make_upstream
from flatshare.policy.gates import make_gate
from flatshare.policy.gates.sessions import SessionLimits

log = logging.getLogger("flatshare.gateway")


@dataclass(frozen=True)
class Gateway:
    """The app and the parts tests and operators may look at."""

    app: FastPaths
    config: GatewayConfig
    pool: BackendPool
    metrics: GatewayMetrics
    audit: AuditLog
    routing: RoutingSwitch
    gate: GateKeeper | None = None


def startup_notes(config: GatewayConfig) -> list[str]:
    """What the gateway says when it starts (the open-mode warning among them)."""
    backends = ", ".join(
        [f"{b.name}={b.url}" for b in config.backends] + [f"dns:{d.name}" for d in config.discover]
    )
    client = resolve_client(config.upstream_client, _backend_urls(config))
    notes = [f"gateway: policy {config.policy}, backends {backends}, upstream client {client}"]
    if config.policy == "threshold":
        t = config.thresholds
        origin = f"calibrated from {t.calibrated_from}" if t.calibrated_from else "set by hand or defaults"
        notes.append(f"gateway: thresholds kv_usage {t.kv_usage}, input_tokens {t.input_tokens} ({origin})")
    if config.open:
        notes.append("gateway: WARNING running open: no tenants (API keys), any client may use any priority")
    if config.baseline:
        items = sorted(config.baseline_settings.items())
        settings = (
            ", ".join(f"{k} {v:g}" if isinstance(v, float) else f"{k} {v}" for k, v in items) or "defaults"
        )
        notes.append(f"gateway: baseline {config.baseline} ({settings})")
    notes.append(f"gateway: audit log {config.audit_log or 'off'}")
    admin = "on (PUT needs the admin token)" if config.admin_token else "off (no admin_token)"
    notes.append(f"gateway: routing changes (PUT /gateway/routing) {admin}")
    return notes


def build_gateway(config: GatewayConfig, clock: Callable[[], float] = time.monotonic) -> Gateway:
    """Everything wired together; nothing runs until the app's lifespan starts."""
    pool = BackendPool(config.backends, config.poll, config.backend_limits)
    switch = RoutingSwitch(RoutingConfig.of(config))
    metrics = GatewayMetrics(pool, clock, switch.current.thresholds)
    audit = AuditLog(config.audit_log or None)
    upstream = make_upstream(
        config.upstream_client,
        _backend_urls(config),
        config.connect_timeout_s,
        config.upstream_timeout_s,
        config.max_upstream_connections,
        auth_headers(config.backend_api_key),
    )
    keeper = (
        GateKeeper(make_gate(config.baseline, config.baseline_settings), pool, clock)
        if config.baseline
        else None
    )
    if keeper is not None:
        keeper.gate.limit_sessions(SessionLimits(config.clients.session_ttl_s, config.clients.max_sessions))
        metrics.watch_baseline(keeper.name, lambda: keeper.gate.counters, keeper.held)
    tenants = Tenants(config)
    access = Access(config, tenants, metrics)
    parts = ProxyParts(
        config=config,
        pool=pool,
        routing=switch,
        metrics=metrics,
        audit=audit,
        tenants=tenants,
        counter=TokenCounter(config.tokens, upstream),
        upstream=upstream,
        clock=clock,
        gate=keeper,
    )
    sequence = itertools.count()
    membership = Membership(pool, upstream, audit, clock)
    metrics.registry.register(membership.collector())
    pollers = [membership.poller(state) for state in pool.states]

    async def models(request: Request) -> Response:
        return JSONResponse({"object": "list", "data": pool.model_cards()})

    async def health(request: Request) -> Response:
        if any(state.healthy for state in pool.states):
            return Response(status_code=200)
        body = {"error": {"message": "no healthy backend", "type": "ServiceUnavailableError", "code": 503}}
        return JSONResponse(body, status_code=503)

    async def metrics_page(request: Request) -> Response:
        return Response(metrics.render(), media_type=CONTENT_TYPE)

    async def backends(request: Request) -> Response:
        now = clock()
        rows = []
        for state in pool.states:
            snap = state.snapshot(now)
            fields = {
                "preemptions_total": snap.preemptions,
                "url": state.config.url,
                "error": state.error,
                "degraded": snap.degraded,
                "poller": state.poller,
            }
            rows.append(backend_fields(snap) | fields)
        return JSONResponse({"backends": rows})

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        if config.open:
            log.warning("running open: no API keys configured, any client may use any priority")
        await upstream.start()
        first_round = [asyncio.ensure_future(p.poll_once()) for p in pollers]
        if first_round:  # none when every backend comes from discovery
            await asyncio.wait(first_round, timeout=config.poll.timeout_s * 3 + 1.0)
        for poller in pollers:
            poller.start()
        await membership.start(config.discover)
        if keeper is not None:
            keeper.start()
        flusher = asyncio.create_task(_flush_every(audit, audit.FLUSH_EVERY_S), name="audit-flush")
        try:
            yield
        finally:
            flusher.cancel()
            if keeper is not None:
                await keeper.stop()
            await membership.stop()
            for poller in pollers:
                await poller.stop()
            await upstream.close()
            audit.close()

    routing = RoutingRoutes(switch, config.admin_token, audit, metrics)
    tenant_names = tuple(t.name for t in config.tenants)
    proxies = {
        "/v1/completions": Proxy(parts, False, sequence),
        "/v1/chat/completions": Proxy(parts, True, sequence),
    }
    routes = [Route(path, proxy, methods=["POST"]) for path, proxy in proxies.items()]  # 405 for GET
    routes += [
        Route("/v1/models", access.guard(Reader.TENANT, models), methods=["GET"]),
        Route("/health", health, methods=["GET"]),
        Route("/metrics", access.guard(Reader.METRICS, metrics_page), methods=["GET"]),
        Route("/gateway/backends", access.guard(Reader.STATUS, backends), methods=["GET"]),
        Route("/gateway/routing", access.guard(Reader.STATUS, routing.get), methods=["GET"]),
        Route("/gateway/routing", routing.put, methods=["PUT"]),
        Route(
            "/gateway/events",
            EventRoute(keeper, config.admin_token, metrics, tenant_names).post,
            methods=["POST"],
        ),
    ]
    fallback = Starlette(routes=routes, lifespan=lifespan)
    fallback.router.redirect_slashes = False  # its redirect's Location repeats the client's Host header
    app = FastPaths(proxies, fallback, frozenset(route.path for route in routes))
    return Gateway(app, config, pool, metrics, audit, switch, keeper)


class FastPaths:
    """Sends `POST` to the proxied paths straight to their handler (no Starlette router and middleware
    on the hot path), and everything else (other routes, lifespan) to the Starlette app. A known path
    with a trailing slash (`/v1/models/`) is redirected (307) to the path without it by a relative
    `Location`: nothing a client sends (its `Host` header) is reflected in the answer."""

    def __init__(self, paths: Mapping[str, ASGIApp], fallback: Starlette, known: frozenset[str]) -> None:
        self.paths = paths
        self.fallback = fallback
        self.known = known

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "POST":
            handler = self.paths.get(scope["path"])
            if handler is not None:
                await handler(scope, receive, send)
                return
        bare = _without_slash(scope["path"]) if scope["type"] == "http" else None
        if bare is not None and bare in self.known:
            query = scope.get("query_string", b"").decode("latin-1")
            location = bare + (f"?{query}" if query else "")
            await RedirectResponse(location, status_code=307)(scope, receive, send)
            return
        try:
            await self.fallback(scope, receive, send)
        except ClientGone:
            log.info("client went away while sending its body to %s", scope.get("path"))
        except Exception as exc:  # Starlette has answered 500: one line instead of uvicorn's traceback
            if scope["type"] != "http":
                raise
            log.error("internal error on %s: %s: %s", scope.get("path"), type(exc).__name__, exc)


def _without_slash(path: str) -> str | None:
    """`path` without its trailing slash; None when it has none (or is `/`)."""
    return path[:-1] if len(path) > 1 and path.endswith("/") else None


async def _flush_every(audit: AuditLog, period_s: float) -> None:
    while True:
        await asyncio.sleep(period_s)
        audit.flush()


def _backend_urls(config: GatewayConfig) -> list[str]:
    """The configured backends' URLs and a sample URL of each discovered name (for the client choice)."""
    return [b.url for b in config.backends] + [d.url("0.0.0.0") for d in config.discover]
