"""One workload request against an OpenAI-compatible endpoint: a streaming `/v1/completions` call whose
every token's arrival lands in a `ReplayRecord`.

The body (built by `flatshare.replay.body`): `prompt` as token ids, `max_tokens`, `priority` (unless disabled), `ignore_eos: true` (so a real
model runs to `max_tokens`, as the simulator does), `temperature: 0`, `stream: true` and
`stream_options: {include_usage, continuous_usage_stats}` (vLLM then reports the running token count on
every chunk, see `flatshare.protocol.sse`). The header `X-Request-Id` carries the workload request id (vLLM
uses it as the base of its own request id, so server logs name the same request). With `session_headers`
(a flatshare gateway with a baseline in front), `X-Flatshare-Session` names the request's session and a
voice turn's `X-Flatshare-First-Sentence-Tokens` its first sentence's tokens (`flatshare.gateway.proxy`).

Outcomes, all recorded (nothing raises): `ok` (the stream ended with `[DONE]` and a finish reason other
than `abort`/`error`); `refused` (an HTTP error status, or an error chunk with a 4xx code before any
token); `failed` (connection error, timeout, an error chunk, a stream cut without `[DONE]`, bad JSON).
Behind a flatshare gateway, the answer's `x-flatshare-backend` header names the backend that served the
request: the record's `engine` becomes that name (else it stays the endpoint's URL). `on_response`, when
given, sees every answer's headers (the admission experiment reads the gateway's routing headers).

`send_s` is when the request's first byte was handed to the kernel, and a token's time when the bytes
that completed its chunk entered the process (both from `flatshare.replay.timed_net`; with another
transport, just before the request goes to httpx, and when httpx hands the chunk over). `end_s`: the
finish chunk's time, or when the failure was seen.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable
from typing import Any

import httpx

from flatshare.protocol.sse import StreamReader, StreamTally
from flatshare.replay.body import request_body
from flatshare.replay.endpoints import Endpoint
from flatshare.replay.ledger import Clock
from flatshare.replay.timed_net import TimedStream
from flatshare.runfiles.records import ReplayRecord
from flatshare.workloads.model import WorkloadRequest

FAILED_REASONS = ("abort", "error")
BACKEND_HEADER = "x-flatshare-backend"
SESSION_HEADER = "X-Flatshare-Session"  # flatshare.gateway.tenants reads these two
FIRST_SENTENCE_HEADER = "X-Flatshare-First-Sentence-Tokens"
OnResponse = Callable[[str, httpx.Headers], None]


async def stream_request(
    client: httpx.AsyncClient,
    endpoint: Endpoint,
    request: WorkloadRequest,
    record: ReplayRecord,
    clock: Clock,
    send_priority: bool = True,
    on_response: OnResponse | None = None,
    session_headers: bool = False,
) -> None:
    """Send `request` to `endpoint` and fill `record` as the stream arrives (see the module docstring).

    Cancelling leaves `record` as far as it got (the caller marks it failed)."""
    content = request_body(request, endpoint.model, send_priority)
    headers = {"Content-Type": "application/json", "X-Request-Id": request.id, "Accept-Encoding": "identity"}
    if session_headers:
        headers |= gateway_headers(request)
    tally = StreamTally()
    record.token_times_s = tally.token_times_s  # tokens show in the record as they arrive
    record.send_s = clock.now()
    try:
        async with client.stream(
            "POST", f"{endpoint.url}/v1/completions", content=content, headers=headers
        ) as response:
            net = response.extensions.get("network_stream")
            try:
                record.send_s = _stamp(clock, getattr(net, "first_write_s", None), record.send_s)
                record.engine = response.headers.get(BACKEND_HEADER) or record.engine
                if on_response is not None:
                    on_response(request.id, response.headers)
                if response.status_code != 200:
                    _refuse(record, response.status_code, await response.aread(), clock.now())
                    return
                await _read(response, tally, clock, net)
            finally:
                if isinstance(net, TimedStream):
                    net.mark_request_done()
    except httpx.TimeoutException as exc:
        _finish(record, tally, clock.now(), f"timeout ({type(exc).__name__})")
        return
    except (httpx.HTTPError, ValueError) as exc:  # ValueError: a chunk that is not JSON
        _finish(record, tally, clock.now(), f"{type(exc).__name__}: {exc}".rstrip(": "))
        return
    _finish(record, tally, clock.now(), None)


async def _read(response: httpx.Response, tally: StreamTally, clock: Clock, net: Any) -> None:
    """Feed the stream to `tally`; a chunk's time is when its last bytes entered the process (the
    timed network stream's `received_s`), else when httpx handed them over."""
    reader = StreamReader(tally)
    encoded = response.headers.get("content-encoding", "identity") != "identity"
    async for data in response.aiter_bytes() if encoded else response.aiter_raw():
        reader.feed(data, _stamp(clock, getattr(net, "received_s", None), None))


def gateway_headers(request: WorkloadRequest) -> dict[str, str]:
    """The headers a flatshare gateway's baseline reads: the session, and a voice turn's first sentence."""
    headers = {SESSION_HEADER: request.session_id}
    if request.first_sentence_tokens is not None:
        headers[FIRST_SENTENCE_HEADER] = str(request.first_sentence_tokens)
    return headers


def _stamp(clock: Clock, perf_s: float | None, fallback: float | None) -> float:
    """A `time.perf_counter()` value as run time; `fallback` (or now) when there is none."""
    if perf_s is not None:
        return perf_s - clock.t0
    return clock.now() if fallback is None else fallback


def _refuse(record: ReplayRecord, status: int, body: bytes, t: float) -> None:
    message = body.decode("utf-8", errors="replace")
    with contextlib.suppress(ValueError, KeyError, TypeError):
        message = str(json.loads(message)["error"]["message"])
    record.status = "refused"
    record.error = f"HTTP {status}: {message[:500]}"
    record.end_s = t


def _finish(record: ReplayRecord, tally: StreamTally, t: float, error: str | None) -> None:
    record.finish_reason = tally.finish_reason
    record.end_s = tally.end_s if tally.end_s is not None and error is None else t
    if error is None:
        error = _stream_problem(tally)
    if error is None:
        record.status, record.error = "ok", None
        return
    refused = tally.error_code is not None and 400 <= tally.error_code < 500 and not tally.token_times_s
    record.status = "refused" if refused else "failed"
    record.error = error


def _stream_problem(tally: StreamTally) -> str | None:
    if tally.error is not None:
        code = f" (code {tally.error_code})" if tally.error_code is not None else ""
        return f"error chunk{code}: {tally.error[:500]}"
    if not tally.done:
        return "the stream ended without [DONE]"
    if tally.finish_reason in FAILED_REASONS:
        return f"finished with reason {tally.finish_reason!r}"
    return None
