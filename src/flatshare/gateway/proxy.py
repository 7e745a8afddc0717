"""Forwarding one completion or chat request: admit, count, decide, send, relay.

1. Read and check the body (`inbound.py`), identify the tenant and settle the priority (`tenants.py`),
   refuse an unknown model (404, when the backends' model lists are known).
2. Count input tokens (`tokens.py`), take a snapshot of every backend, keep the candidates (healthy,
   serving the model, not yet tried) and ask the policy. Each decision is audited and counted.
3. Send the request (the body as received, unless the priority changed). A backend that refuses the
   connection, fails before answering, or answers 500/502/503/504 is marked and the request goes to
   the next decision among the remaining candidates; none left: 503 with `Retry-After`.
4. Relay the answer. Streams pass through whole events at a time (`sse.py`); if the upstream breaks or
   ends without `[DONE]`, the client gets an explicit `data: {"error": ...}` event and then
   `data: [DONE]`, never a silent truncation. A client that goes away closes the upstream request,
   which makes vLLM abort it.

With a baseline on (`baseline` in the settings; `gating.py`), the first attempt waits in the gate after
its backend is chosen, goes out with the `max_tokens` the gate chose, and a stream is read up to its first
token before anything is relayed, racing the gate's abort signal: an abort first closes the upstream stream
(vLLM aborts the request) and the request waits in the gate again, to be resubmitted to the same backend;
the client sees only a later first token. Header `X-Flatshare-Session` names the request's session for
the gate's events (scoped by tenant: `tenants.session_key`); `X-Flatshare-First-Sentence-Tokens` (a
voice client's estimate) lets the gate know when a turn's first sentence is out (token events are
counted as they are relayed). A retry after a failed backend goes out ungated.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
import time
import uuid
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator
from dataclasses import dataclass
from typing import Any

from starlette.requests import Request
from starlette.types import Message, Receive, Scope, Send

from flatshare.aiotasks import cancel
from flatshare.gateway.audit import AuditLog, decision_record
from flatshare.gateway.backends import BackendPool, BackendState
from flatshare.gateway.config import GatewayConfig
from flatshare.gateway.errors import GatewayError
from flatshare.gateway.gating import GateKeeper
from flatshare.gateway.inbound import ClientGone, Inbound, ascii_count, parse_inbound, read_body
from flatshare.gateway.input_count import TokenCount, TokenCounter
from flatshare.gateway.relay import response_headers, send_stream, send_whole
from flatshare.gateway.sse import DONE, EventFramer, EventTooLarge, token_events
from flatshare.gateway.switch import RoutingSwitch
from flatshare.gateway.telemetry import NO_BACKEND, GatewayMetrics
from flatshare.gateway.tenants import CallerGrant, Tenants
from flatshare.gateway.upstream import FirstByteTimeout, Upstream, UpstreamError, UpstreamResponse
from flatshare.policy.gates.core import GateRequest
from flatshare.policy.routing import RequestFeatures, RoutingDecision

log = logging.getLogger("flatshare.gateway")
RETRY_STATUSES = frozenset({500, 502, 503, 504})
FIRST_SENTENCE_HEADER = "x-flatshare-first-sentence-tokens"
MAX_FIRST_SENTENCE_TOKENS = 1_000_000  # larger (or not ASCII digits): the header is ignored


@dataclass(frozen=True)
class ProxyParts:
    """What the proxy works with; built once by the app. `routing.current` is read once per decision
    (the routing in force when the decision is made; `PUT /gateway/routing` swaps it)."""

    config: GatewayConfig
    pool: BackendPool
    routing: RoutingSwitch
    metrics: GatewayMetrics
    audit: AuditLog
    tenants: Tenants
    counter: TokenCounter
    upstream: Upstream
    clock: Callable[[], float] = time.monotonic
    gate: GateKeeper | None = None


@dataclass(frozen=True)
class Job:
    """One admitted request on its way upstream."""

    inbound: Inbound
    grant: CallerGrant
    count: TokenCount
    features: RequestFeatures
    payload: bytes
    session: str | None = None
    first_sentence_tokens: int | None = None


class Proxy:
    """The ASGI endpoint behind /v1/completions (`chat` False) and /v1/chat/completions."""

    def __init__(self, parts: ProxyParts, chat: bool, sequence: Iterator[int]) -> None:
        self.parts = parts
        self.chat = chat
        self._sequence = sequence

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Every outcome is counted in `responses_total` (and a refusal in `errors_total`): a refusal is
        its JSON error; a client leaving is 499 (nothing sent); the server cutting the request at its
        drain timeout ends it as a dead backend would (`_cut`); an unexpected exception (the gateway's
        own bug, never a client's input) is a 500 and one log line."""
        metrics = self.parts.metrics
        metrics.in_flight.inc()
        watched = _Watched(send)
        job: Job | None = None
        try:
            request = Request(scope, receive)
            job = await self._admit(request)
            status = await _unless_client_leaves(self._forward(job, watched), receive)
        except GatewayError as exc:
            metrics.error(exc.kind)
            status = exc.status
            await _refuse(exc, scope, receive, watched)
        except ClientGone:
            log.info("client %s went away while sending its body", _client(scope))
            status = CLIENT_GONE
        except asyncio.CancelledError:  # the server stopped waiting: its drain timeout ran out
            status = await self._cut(job, scope, receive, watched)
        except Exception as exc:
            log.error("internal error on %s: %s: %s", scope.get("path"), type(exc).__name__, exc)
            metrics.error("internal")
            status = 500
            internal = GatewayError(500, "internal gateway error", "internal", "InternalServerError")
            await _refuse(internal, scope, receive, watched)
        finally:
            metrics.in_flight.dec()
        metrics.response(status)

    async def _cut(self, job: Job | None, scope: Scope, receive: Receive, watched: _Watched) -> int:
        """End a request the drain timeout cut: a started stream gets an error event and `[DONE]`, an
        unanswered request a 503; one log line each. Its status (200 once a stream had started)."""
        what = f"request {job.features.request_id}" if job is not None else f"a request from {_client(scope)}"
        log.warning("drain timeout: cut %s (the gateway is shutting down)", what)
        self.parts.metrics.error("shutdown")
        error = GatewayError(
            503,
            "the gateway is shutting down and its drain timeout cut this request; retry",
            "shutdown",
            "ServiceUnavailableError",
            headers={"Retry-After": str(self.parts.config.retry_after_s)},
        )
        if watched.status is None:
            await _refuse(error, scope, receive, watched)
            return error.status
        if not watched.ended:
            body = error.sse_event() + DONE if watched.streaming else b""
            await watched({"type": "http.response.body", "body": body, "more_body": False})
        return watched.status

    # -- admission: tenant, class, priority ------------------------------------------------------------
    async def _admit(self, request: Request) -> Job:
        parts = self.parts
        raw = await read_body(request, parts.config.max_body_bytes, parts.config.clients.body_timeout_s)
        inbound = parse_inbound(raw, self.chat)
        grant = parts.tenants.admit(request.headers, inbound.body.get("priority"))
        known = parts.pool.known_models
        if inbound.model is not None and known and inbound.model not in known:
            raise GatewayError(
                404, f"The model `{inbound.model}` does not exist.", "unknown_model", "NotFoundError", "model"
            )
        sequence = next(self._sequence)
        count = await self._count(inbound, sequence)
        parts.metrics.counted(grant.cls, count.tokens)
        request_id = _request_id(request.headers.get("x-request-id"))
        max_tokens = inbound.body.get("max_tokens")
        features = RequestFeatures(
            request_id,
            count.tokens,
            sequence,
            grant.priority,
            grant.cls,
            max_tokens if isinstance(max_tokens, int) else None,
        )
        sentence = ascii_count(request.headers.get(FIRST_SENTENCE_HEADER), MAX_FIRST_SENTENCE_TOKENS)
        first_sentence = sentence if sentence and sentence <= MAX_FIRST_SENTENCE_TOKENS else None
        payload = _payload(inbound, grant)
        return Job(inbound, grant, count, features, payload, grant.session, first_sentence)

    async def _count(self, inbound: Inbound, sequence: int) -> TokenCount:
        pool = self.parts.pool

        def backend_url() -> str | None:  # only asked when an exact count is wanted
            candidates = pool.candidates(pool.snapshots(self.parts.clock()), inbound.model)
            return (
                pool.by_name[candidates[sequence % len(candidates)].name].config.url if candidates else None
            )

        count = await self.parts.counter.count(inbound.body, inbound.chat, inbound.model, backend_url)
        if count.error:
            self.parts.metrics.error("tokenize")
        return count

    # -- routing and sending -----------------------------------------------------------------------------
    async def _forward(self, job: Job, send: Send) -> int:
        """Send to the chosen backend, re-deciding after a failure; relay the answer; its status."""
        parts = self.parts
        tried: list[str] = []
        for attempt in itertools.count(1):
            state, decision = self._decide(job, frozenset(tried), attempt)
            if attempt > 1:
                parts.metrics.retries.inc()
            if attempt == 1 and parts.gate is not None:
                status = await self._gated(parts.gate, job, state, decision, send)
            else:
                status = await self._attempt(job, state, decision, job.payload, send)
            if status is not None:
                return status
            tried.append(state.name)
        raise AssertionError("unreachable")  # pragma: no cover

    async def _attempt(
        self,
        job: Job,
        state: BackendState,
        decision: RoutingDecision,
        payload: bytes,
        send: Send,
        gate: tuple[GateKeeper, str] | None = None,
    ) -> int | None:
        """Send once to `state` and relay the answer: its status, None when the backend failed before
        answering (the caller tries the next), `ABORTED` when the gate aborted it first (gated streams)."""
        parts = self.parts
        started = parts.clock()
        # a stream's head comes at once (vLLM answers before queueing): waiting longer is a hung backend
        head_timeout = state.limits.first_byte_timeout_s if job.inbound.stream else None
        try:
            url = state.config.url + self._path
            upstream = await parts.upstream.post(url, payload, self._headers(job), head_timeout)
        except FirstByteTimeout as exc:
            state.mark_degraded(f"proxy: {exc}", parts.clock())
            log.warning("backend %s is degraded: %s", state.name, exc)
            parts.metrics.error("upstream_timeout")
            return None
        except UpstreamError as exc:
            state.record_failure(f"proxy: {exc}", refused=exc.refused)
            parts.metrics.error("upstream_connect")
            return None
        state.answered()
        if upstream.status in RETRY_STATUSES:
            await upstream.close()
            state.record_failure(f"proxy: upstream answered {upstream.status}")
            parts.metrics.error("upstream_status")
            return None
        headers = response_headers(upstream, decision, job.features.request_id)
        if job.inbound.stream and upstream.status == 200:
            if gate is not None:
                keeper, gate_id = gate
                first = await _first_token(
                    upstream, keeper.abort_signal(gate_id), state.limits.max_event_bytes
                )
                if first is None:
                    return ABORTED
                keeper.first_token(gate_id)
                if job.first_sentence_tokens is not None:
                    first.count_tokens(lambda n: keeper.progress(gate_id, n), job.first_sentence_tokens)
                upstream = first
            cls = job.grant.cls
            await send_stream(upstream, state, headers, parts.metrics, cls, started, parts.clock, send)
            return 200
        return await send_whole(upstream, state, headers, send, parts.config.clients.max_response_bytes)

    async def _gated(
        self, keeper: GateKeeper, job: Job, state: BackendState, decision: RoutingDecision, send: Send
    ) -> int | None:
        """The first attempt through the baseline's gate (module docstring)."""
        gate_id = f"g{job.features.sequence}"
        request = GateRequest(
            gate_id,
            state.name,
            job.grant.priority,
            job.count.tokens,
            job.features.max_tokens,
            job.session,
            abortable=job.inbound.stream,
            first_sentence_tokens=job.first_sentence_tokens,
        )
        try:
            max_tokens = await keeper.admit(request)
            while True:
                payload = _with_max_tokens(job, max_tokens)
                status = await self._attempt(job, state, decision, payload, send, (keeper, gate_id))
                if status != ABORTED:
                    return status
                keeper.aborted(gate_id)
                max_tokens = await keeper.resubmit(gate_id)
        finally:
            keeper.finished(gate_id)

    @property
    def _path(self) -> str:
        return "/v1/chat/completions" if self.chat else "/v1/completions"

    def _headers(self, job: Job) -> dict[str, str]:
        # the backend's API key goes with every request the upstream client sends (upstream.auth_headers)
        return {"content-type": "application/json", "x-request-id": job.features.request_id}

    def _decide(self, job: Job, tried: frozenset[str], attempt: int) -> tuple[BackendState, RoutingDecision]:
        parts = self.parts
        snapshots = parts.pool.snapshots(parts.clock())
        candidates = parts.pool.candidates(snapshots, job.inbound.model, tried)
        routing = parts.routing.current
        decision = routing.policy(job.features, candidates) if candidates else None
        parts.audit.write(
            decision_record(
                request_id=job.features.request_id,
                grant=job.grant,
                model=job.inbound.model,
                stream=job.inbound.stream,
                count=job.count,
                policy=routing.config.policy,
                thresholds=routing.thresholds,
                snapshots=snapshots,
                candidates=candidates,
                decision=decision,
                attempt=attempt,
            )
        )
        if decision is None:
            parts.metrics.decided(NO_BACKEND, "no_backend", None)
            raise _no_backend(job.inbound.model, sorted(tried), parts.config.retry_after_s)
        preferred = next(s for s in snapshots if s.name == decision.preferred)
        parts.metrics.decided(decision.backend, decision.reason, preferred.pressure)
        return parts.pool.by_name[decision.backend], decision


CLIENT_GONE = 499  # nginx's "client closed request": counted, never sent
ABORTED = -1  # a gated attempt the gate aborted before its first token: never a response status


class _Prefetched:
    """An upstream response whose head (the bytes up to its first token) was read ahead, with how the
    stream ended if it ended there; relays as the original would."""

    def __init__(
        self,
        upstream: UpstreamResponse,
        rest: AsyncIterator[bytes],
        head: bytes,
        ending: Exception | None,
        max_event_bytes: int,
    ) -> None:
        self.status = upstream.status
        self.headers = upstream.headers
        self._upstream = upstream
        self._rest = rest
        self._head = head
        self._ending = ending
        self._on_tokens: Callable[[int], None] | None = None
        self._until = 0
        self._counted = 0
        self._framer = EventFramer(max_event_bytes)

    def count_tokens(self, on_tokens: Callable[[int], None], until: int) -> None:
        """Report the token events relayed so far to `on_tokens`, until there are `until` of them (each
        event carrying output counts one token: vLLM streams a token an event unless it falls behind)."""
        self._on_tokens, self._until = on_tokens, until

    async def chunks(self) -> AsyncIterator[bytes]:
        if self._head:
            self._count(self._head)
            yield self._head
        if isinstance(self._ending, StopAsyncIteration):
            return
        if self._ending is not None:
            raise self._ending
        async for chunk in self._rest:
            self._count(chunk)
            yield chunk

    def _count(self, chunk: bytes) -> None:
        if self._on_tokens is None or self._counted >= self._until:
            return
        found = token_events(self._framer.feed(chunk))
        if found:
            self._counted += found
            self._on_tokens(self._counted)

    async def read(self) -> bytes:
        return b"".join([chunk async for chunk in self.chunks()])

    async def close(self) -> None:
        await self._upstream.close()


async def _first_token(
    upstream: UpstreamResponse, abort: asyncio.Event, max_event_bytes: int
) -> _Prefetched | None:
    """Read the stream up to its first event carrying a token (`sse.carries_token`; a chat stream's
    opening role event carries none), racing the gate's abort signal. On abort the upstream stream is
    closed (the backend aborts the request) and None is returned. An event past `max_event_bytes` ends
    the read there (the relay's own framer refuses it and ends the stream with an error event)."""
    rest = upstream.chunks().__aiter__()
    framer = EventFramer(max_event_bytes)
    head: list[bytes] = []
    ending: Exception | None = None
    aborted = asyncio.ensure_future(abort.wait())
    try:
        while not framer.first_token:
            chunk = asyncio.ensure_future(rest.__anext__())
            await asyncio.wait((chunk, aborted), return_when=asyncio.FIRST_COMPLETED)
            if not chunk.done():
                chunk.cancel()
                with contextlib.suppress(asyncio.CancelledError, StopAsyncIteration, UpstreamError):
                    await chunk
                await upstream.close()
                return None
            try:
                data = chunk.result()
            except (StopAsyncIteration, UpstreamError) as exc:
                ending = exc
                break
            head.append(data)
            try:
                framer.feed(data)
            except EventTooLarge:
                break
    finally:
        aborted.cancel()
    return _Prefetched(upstream, rest, b"".join(head), ending, max_event_bytes)


def _with_max_tokens(job: Job, max_tokens: int | None) -> bytes:
    """The job's payload, with `max_tokens` (and `max_completion_tokens` when the body has it) set when
    the gate changed it."""
    if max_tokens is None or max_tokens == job.features.max_tokens:
        return job.payload
    body: dict[str, Any] = {**json.loads(job.payload), "max_tokens": max_tokens}
    if "max_completion_tokens" in body:
        body["max_completion_tokens"] = max_tokens
    return json.dumps(body, separators=(",", ":")).encode()


async def _unless_client_leaves(forward: Coroutine[Any, Any, int], receive: Receive) -> int:
    """Run `forward` until it ends or the client disconnects, whichever is first. A client leaving
    cancels it, which closes the upstream response (relay.py), so vLLM aborts the request: while
    waiting for a non-streaming answer or for the first event as well as mid-stream."""
    work = asyncio.ensure_future(forward)
    gone = asyncio.ensure_future(_disconnected(receive))
    try:
        await asyncio.wait((work, gone), return_when=asyncio.FIRST_COMPLETED)
    except BaseException:  # this handler itself cancelled (a shutdown that stopped waiting)
        work.cancel()
        await asyncio.wait((work,))  # its relay has stopped sending before the caller ends the response
        raise
    finally:
        gone.cancel()
    if work.done():
        return work.result()
    await cancel(work)
    return CLIENT_GONE


async def _disconnected(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


class _Watched:
    """The ASGI `send` of one request, remembering how far its response got."""

    def __init__(self, send: Send) -> None:
        self._send = send
        self.status: int | None = None
        self.streaming = False
        self.ended = False

    async def __call__(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            self.status = message["status"]
            self.streaming = any(
                k.lower() == b"content-type" and v.startswith(b"text/event-stream")
                for k, v in message["headers"]
            )
        elif message["type"] == "http.response.body" and not message.get("more_body", False):
            self.ended = True
        await self._send(message)


async def _refuse(error: GatewayError, scope: Scope, receive: Receive, send: _Watched) -> None:
    """Answer `error` as JSON, unless a response has begun (then end it as it is)."""
    if send.status is None:
        await error.response()(scope, receive, send)
    elif not send.ended:
        await send({"type": "http.response.body", "body": b"", "more_body": False})


def _client(scope: Scope) -> str:
    client = scope.get("client")
    return f"{client[0]}:{client[1]}" if client else "unknown"


def _payload(inbound: Inbound, grant: CallerGrant) -> bytes:
    """The body to send: as received, unless the priority to forward differs from the body's."""
    if inbound.body.get("priority", 0) == grant.priority:
        return inbound.raw
    body: dict[str, Any] = {**inbound.body, "priority": grant.priority}
    return json.dumps(body, separators=(",", ":")).encode()


def _request_id(given: str | None) -> str:
    if given and len(given) <= 128 and given.isprintable():
        return given
    return f"gw-{uuid.uuid4().hex}"


def _no_backend(model: str | None, tried: list[str], retry_after_s: int) -> GatewayError:
    what = f"serves model {model!r}" if model else "is available"
    failed = f" (failed for this request: {', '.join(tried)})" if tried else ""
    return GatewayError(
        503,
        f"no healthy backend {what}{failed}; try again later",
        "no_backend",
        "ServiceUnavailableError",
        headers={"Retry-After": str(retry_after_s)},
    )
