"""Relaying a backend's answer to the client, straight on the ASGI interface.

Streams pass through whole events at a time (`sse.py`). If the upstream connection breaks, or the stream
ends without `data: [DONE]`, the client gets an explicit `data: {"error": {...}}` event (type
`BadGatewayError`, code 502, naming the backend) and then `data: [DONE]`, as vLLM reports its own
failures mid-stream: never a silent truncation; an event larger than `backend_limits.max_event_bytes`
ends the stream the same way (and counts as a failure of the backend). A break after `[DONE]` was relayed adds nothing (the
client's stream is already whole), though the backend's failure is still recorded. The upstream response
is closed however the relay ends; when the client goes away the proxy cancels the relay, and closing the
connection makes vLLM abort the request. Non-streaming answers are read whole first (at most `clients.max_response_bytes`), so a failure while
reading, or an answer too large, becomes a clean 502.
"""

from __future__ import annotations

from collections.abc import Callable

from starlette.types import Send

from flatshare.gateway.backends import BackendState
from flatshare.gateway.errors import GatewayError
from flatshare.gateway.sse import DONE, EventFramer, EventTooLarge
from flatshare.gateway.telemetry import GatewayMetrics
from flatshare.gateway.upstream import UpstreamError, UpstreamResponse
from flatshare.policy.routing import RoutingDecision

_DROP_HEADERS = frozenset(
    {"content-length", "transfer-encoding", "connection", "keep-alive", "date", "server"}
)
RawHeaders = list[tuple[bytes, bytes]]


def response_headers(upstream: UpstreamResponse, decision: RoutingDecision, request_id: str) -> RawHeaders:
    """The upstream's headers minus hop-by-hop ones, plus where the request went and why."""
    headers = [
        (k.lower().encode(), v.encode()) for k, v in upstream.headers if k.lower() not in _DROP_HEADERS
    ]
    headers += [
        (b"x-flatshare-backend", decision.backend.encode()),
        (b"x-flatshare-reason", decision.reason.encode()),
        (b"x-flatshare-preferred", decision.preferred.encode()),
        (b"x-request-id", request_id.encode()),
    ]
    return headers


async def send_whole(
    upstream: UpstreamResponse, state: BackendState, headers: RawHeaders, send: Send, limit: int
) -> int:
    """A non-streaming answer, read whole then sent; a failure while reading raises a 502, and so does an
    answer of more than `limit` bytes (`clients.max_response_bytes`), read no further."""
    try:
        body = await _read_at_most(upstream, limit, state.name)
    except UpstreamError as exc:
        state.record_failure(f"proxy: {exc}")
        raise GatewayError(
            502,
            f"backend {state.name} failed while answering: {exc}",
            "upstream_midstream",
            "BadGatewayError",
        ) from exc
    finally:
        await upstream.close()
    headers.append((b"content-length", str(len(body)).encode()))
    await send({"type": "http.response.start", "status": upstream.status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
    return upstream.status


async def _read_at_most(upstream: UpstreamResponse, limit: int, backend: str) -> bytes:
    chunks: list[bytes] = []
    size = 0
    async for chunk in upstream.chunks():
        size += len(chunk)
        if size > limit:
            raise GatewayError(
                502,
                f"backend {backend} answered more than the gateway's limit of {limit} bytes",
                "response_too_large",
                "BadGatewayError",
            )
        chunks.append(chunk)
    return b"".join(chunks)


async def send_stream(
    upstream: UpstreamResponse,
    state: BackendState,
    headers: RawHeaders,
    metrics: GatewayMetrics,
    cls: str,
    started: float,
    clock: Callable[[], float],
    send: Send,
) -> None:
    """Relay a 200 event stream (module docstring); the upstream is closed however it ends (cancelled
    included: the proxy cancels the relay when the client goes away)."""
    framer, timed = EventFramer(state.limits.max_event_bytes), False
    try:
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        try:
            async for chunk in upstream.chunks():
                ready = framer.feed(chunk)
                if ready:
                    if not timed and framer.first_token:
                        metrics.first_token(cls, clock() - started)
                        timed = True
                    await send({"type": "http.response.body", "body": ready, "more_body": True})
            rest = framer.flush()
            failure = None if framer.done else f"backend {state.name} ended the stream without [DONE]"
        except UpstreamError as exc:
            state.record_failure(f"proxy: {exc}")
            # A break after `[DONE]` was relayed (a backend killed before its response's end) leaves the
            # client's stream whole: an error event and a second `[DONE]` after it would be a corrupt one.
            rest = b""
            failure = None if framer.done else f"backend {state.name} failed mid-stream: {exc}"
        except EventTooLarge as exc:
            state.record_failure(f"proxy: {exc}")
            rest, failure = b"", f"backend {state.name} sent a malformed stream: {exc}"
        if failure is not None:
            metrics.error("upstream_midstream")
            rest += GatewayError(502, failure, "upstream_midstream", "BadGatewayError").sse_event() + DONE
        await send({"type": "http.response.body", "body": rest, "more_body": False})
    finally:
        await upstream.close()
