"""A canned vLLM stand-in for measuring the gateway itself (benchmarks/gateway_overhead.py).

`python benchmarks/canned_vllm.py --port P [--tokens 16] [--interval-ms 1]`: a raw asyncio HTTP/1.1
keep-alive server. `POST /v1/completions` (any body) streams `--tokens` SSE token events `--interval-ms`
apart, one chunked write each as vLLM streams, then `data: [DONE]`; `GET /metrics` answers vLLM's KV and
queue gauges (fixed values), `/health` and `/v1/models` what the gateway's poller needs. It spends a few
microseconds per request, so a benchmark through it measures the proxy in front, not a model.

`--misbehave` makes it a broken backend (benchmarks/gateway_soak.py): `/metrics` answers a
page with `+Inf`, an overflowing sum, `NaN` or a 400-digit number on every other second, and requests
cycle through three answers: a normal stream, a stream framed with CRLF line ends (legal SSE), and no
answer at all (it holds the connection until the client closes it).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
import typing

METRICS = (
    "# TYPE vllm:kv_cache_usage_perc gauge\n"
    'vllm:kv_cache_usage_perc{engine="0",model_name="canned"} 0.25\n'
    "# TYPE vllm:num_requests_running gauge\n"
    'vllm:num_requests_running{engine="0",model_name="canned"} 1.0\n'
    "# TYPE vllm:num_requests_waiting gauge\n"
    'vllm:num_requests_waiting{engine="0",model_name="canned"} 0.0\n'
)
BAD_METRICS = (
    METRICS.replace(
        'running{engine="0",model_name="canned"} 1.0', 'running{engine="0",model_name="canned"} +Inf'
    ),
    METRICS + 'vllm:num_requests_waiting{engine="1",model_name="canned"} 1e308\n'
    'vllm:num_requests_waiting{engine="2",model_name="canned"} 1e308\n',
    METRICS.replace("0.25", "NaN"),
    METRICS.replace("0.0\n", "9" * 400 + "\n"),
)
MODELS = json.dumps({"object": "list", "data": [{"id": "canned", "object": "model"}]})


class Canned(asyncio.Protocol):
    """Minimal HTTP/1.1 keep-alive server (one request at a time per connection)."""

    tokens = 16
    interval_s = 0.001
    misbehave = False
    requests = 0
    models = MODELS

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport, self.buffer = typing.cast(asyncio.Transport, transport), b""

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while (end := self.buffer.find(b"\r\n\r\n")) >= 0:
            head = self.buffer[:end].decode("latin-1").lower()
            length = next(
                (int(h.split(":")[1]) for h in head.split("\r\n") if h.startswith("content-length")), 0
            )
            if len(self.buffer) < end + 4 + length:
                return
            self.buffer = self.buffer[end + 4 + length :]
            self.task = asyncio.ensure_future(self.respond(head.split(" ")[1]))

    async def respond(self, path: str) -> None:
        plain = {"/metrics": METRICS, "/health": "", "/v1/models": self.models}.get(path)
        line_end = "\n"
        if self.misbehave:
            now = int(time.monotonic())
            if path == "/metrics" and now % 2:
                plain = BAD_METRICS[now // 2 % len(BAD_METRICS)]
            elif plain is None:
                Canned.requests += 1
                if Canned.requests % 3 == 0:
                    return None  # hangs: never answers
                line_end = "\r\n" if Canned.requests % 3 == 1 else "\n"
        if plain is not None:
            head = f"HTTP/1.1 200 OK\r\ncontent-length: {len(plain)}\r\n\r\n"
            return self.transport.write((head + plain).encode())
        self.transport.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
        )
        for i in range(self.tokens):
            finish = '"length"' if i == self.tokens - 1 else "null"
            event = (
                f'data: {{"choices":[{{"index":0,"text":" w{i}","finish_reason":{finish}}}]}}\n\n'.replace(
                    "\n", line_end
                ).encode()
            )
            self.transport.write(b"%x\r\n%s\r\n" % (len(event), event))
            if self.interval_s:
                await asyncio.sleep(self.interval_s)
        done = f"data: [DONE]{line_end}{line_end}".encode()
        self.transport.write(b"%x\r\n%s\r\n0\r\n\r\n" % (len(done), done))


def serve_canned(port: int, tokens: int, interval_ms: float, misbehave: bool = False) -> None:
    Canned.tokens, Canned.interval_s, Canned.misbehave = tokens, interval_ms / 1000, misbehave
    loop = asyncio.new_event_loop()
    server = loop.run_until_complete(loop.create_server(Canned, "127.0.0.1", port, backlog=4096))
    print(f"canned backend on {port}", flush=True)
    loop.run_until_complete(server.serve_forever())


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--tokens", type=int, default=16, help="token events per stream")
    parser.add_argument("--interval-ms", type=float, default=1.0, help="time between token events")
    parser.add_argument("--model", default="canned", help="the model id /v1/models lists")
    parser.add_argument("--misbehave", action="store_true", help="a broken backend (see the docstring)")
    args = parser.parse_args()
    Canned.models = json.dumps({"object": "list", "data": [{"id": args.model, "object": "model"}]})
    serve_canned(args.port, args.tokens, args.interval_ms, args.misbehave)


if __name__ == "__main__":
    main()
