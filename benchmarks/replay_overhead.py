"""What the wall-clock replay driver adds to measured first-token times, at 200+ concurrent streams.

serve-sim runs in a child process (2 cores: one for the server, one for the driver), wrapped in a
middleware that notes per request (by `X-Request-Id`) when the app received it and when it sent the
first SSE chunk of output: the server's own time to first token, compared side by side with the
driver's record. The difference is split at the server into `send -> server app` and `first chunk ->
read` (both processes read CLOCK_MONOTONIC through `time.perf_counter`, comparable on Linux).
Both processes also watch their event loop: a freeze over 100 ms (far above the driver's own work here,
~0.16 ms of CPU a token) is the machine not running the process (other tenants of a shared machine); figures
are printed with and without the requests whose added time (to the app, or back) overlaps one (or the
100 ms after it, while the process catches up).
Targets: at least 200 requests in flight at once; added p99 under 5 ms. They are the driver's, on a machine
that runs both processes when they have work (one core each): with the 1-minute load average above the
cores, other work holds the CPUs, the added time is mostly the processes' waits for one (printed from the
run queue), and the targets are not judged (exit code 2; PASS 0, FAIL 1).

    python benchmarks/replay_overhead.py [--sessions 240] [--requests 4] [--prompt 512] [--max-tokens 32]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from flatshare.replay.endpoints import Endpoint
from flatshare.replay.ledger import Ledger
from flatshare.replay.wallclock import WallClockOptions, run_in_loop, run_wallclock
from flatshare.runfiles.records import ReplayRecord
from flatshare.runfiles.run import write_replay_run
from flatshare.testing.procstat import cpu_seconds, run_queue_seconds
from flatshare.workloads.model import Session, Workload, WorkloadRequest
from flatshare.workloads.tokens import unique_span

TIMINGS_PATH = "/_bench/timings"
FREEZE_S = 0.1  # a process not running its event loop this long is not doing driver work (see report)


class FreezeProbe:
    """Sleeps `period_s` again and again; `lag_ms` is how late each wake-up was, and `freezes` the
    (start, end) `perf_counter` windows where the loop did not run for over `FREEZE_S`."""

    def __init__(self, period_s: float = 0.002) -> None:
        self.period_s = period_s
        self.lag_ms: list[float] = []
        self.freezes: list[tuple[float, float]] = []

    async def run(self) -> None:
        while True:
            start = time.perf_counter()
            await asyncio.sleep(self.period_s)
            end = time.perf_counter()
            self.lag_ms.append((end - start - self.period_s) * 1000)
            if end - start > FREEZE_S:
                self.freezes.append((start, end))


class FirstChunkTimer:
    """ASGI middleware: per `/v1/completions` request, (received, first data chunk sent) in
    `time.perf_counter` seconds, keyed by `X-Request-Id`; served as JSON on `TIMINGS_PATH` with the
    server's own event-loop freezes."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.timings: dict[str, list[float]] = {}
        self.probe = FreezeProbe()
        self._probing: asyncio.Task[None] | None = None

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if self._probing is None and scope["type"] == "http":
            self._probing = asyncio.create_task(self.probe.run())
        if scope["type"] == "http" and scope["path"] == TIMINGS_PATH:
            body = json.dumps({"timings": self.timings, "freezes": self.probe.freezes}).encode()
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": body})
            return
        if scope["type"] != "http" or scope["path"] != "/v1/completions":
            await self.app(scope, receive, send)
            return
        request_id = dict(scope["headers"]).get(b"x-request-id", b"").decode()
        entry = self.timings.setdefault(request_id, [time.perf_counter()])

        async def timed_send(message: Any) -> None:
            body = message.get("body", b"") if message["type"] == "http.response.body" else b""
            if len(entry) == 1 and body.startswith(b"data: {"):
                entry.append(time.perf_counter())
            await send(message)

        await self.app(scope, receive, timed_send)


def serve(port: int, kv_tokens: int, batched_tokens: int) -> None:
    """The child process: serve-sim with the timing middleware, run as `flatshare serve-sim` runs it."""
    import uvicorn

    from flatshare.serve.server import build_sim_app
    from flatshare.sim.config import EngineConfig
    from flatshare.sim.profile import load_profile

    config = EngineConfig(
        kv_tokens=kv_tokens, max_model_len=8192, max_num_seqs=256, max_num_batched_tokens=batched_tokens
    )
    app = FirstChunkTimer(build_sim_app(config, load_profile()))
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", backlog=1024)


def build_workload(args: argparse.Namespace) -> Workload:
    """Sessions starting over the first `ramp` seconds, each of `requests` requests 50-150 ms apart."""
    rng = np.random.default_rng(args.seed)
    out = []
    for i in range(args.sessions):
        sid = f"bench/{i}"
        start = float(rng.uniform(0, args.ramp))
        items = tuple(
            WorkloadRequest(
                id=f"{sid}/{k}",
                session_id=sid,
                cls="chat",
                priority=0,
                prompt=(unique_span(f"{sid}/{k}", args.prompt),),
                max_tokens=args.max_tokens,
                pause_before_s=start if k == 0 else float(rng.uniform(0.05, 0.15)),
            )
            for k in range(args.requests)
        )
        out.append(Session(sid, "chat", start, items))
    return Workload("replay-overhead", tuple(out), args.seed)


@dataclass
class Measurement:
    ledger: Ledger
    timings: dict[str, list[float]]
    server_lag: str
    wall_s: float
    driver_cpu_s: float
    server_cpu_s: float
    driver_queued_s: float
    server_queued_s: float
    probe: FreezeProbe
    server_freezes: list[tuple[float, float]]


async def wait_healthy(url: str, child: subprocess.Popen[bytes], timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    async with httpx.AsyncClient() as client:
        while time.monotonic() < deadline and child.poll() is None:
            with contextlib.suppress(httpx.HTTPError):
                if (await client.get(f"{url}/health")).status_code == 200:
                    return
            await asyncio.sleep(0.25)
    raise RuntimeError(f"serve-sim on {url} did not become healthy")


async def measure(url: str, workload: Workload, child: subprocess.Popen[bytes]) -> Measurement:
    await wait_healthy(url, child)
    ledger = Ledger()
    gc.collect()
    gc.freeze()  # as vLLM's server does after start-up: no full collection pauses over the imports
    probe = FreezeProbe()
    probing = asyncio.create_task(probe.run())
    cpu, server_cpu, wall = time.process_time(), cpu_seconds(child.pid), time.perf_counter()
    queued, server_queued = run_queue_seconds(os.getpid()), run_queue_seconds(child.pid)
    await run_wallclock(workload, [Endpoint(url, "sim")], ledger, WallClockOptions(max_concurrency=1024))
    cpu, server_cpu = time.process_time() - cpu, cpu_seconds(child.pid) - server_cpu
    queued = run_queue_seconds(os.getpid()) - queued
    server_queued = run_queue_seconds(child.pid) - server_queued
    probing.cancel()
    wall = time.perf_counter() - wall
    async with httpx.AsyncClient(timeout=30) as client:
        server = (await client.get(f"{url}{TIMINGS_PATH}")).json()
        metrics = (await client.get(f"{url}/metrics")).text
    lag = next((line.split()[-1] for line in metrics.splitlines() if line.startswith("flatshare:")), "?")
    freezes = [(a, b) for a, b in server["freezes"]]
    return Measurement(
        ledger, server["timings"], lag, wall, cpu, server_cpu, queued, server_queued, probe, freezes
    )


def in_flight_profile(records: list[ReplayRecord]) -> tuple[int, float]:
    """(most requests in flight at once, mean in flight over the middle 80% of the run)."""
    events = sorted([(r.send_s, 1) for r in records] + [(r.end_s or r.send_s, -1) for r in records])
    start, end = events[0][0], events[-1][0]
    lo, hi = start + 0.1 * (end - start), start + 0.9 * (end - start)
    level, peak, area, last = 0, 0, 0.0, start
    for t, step in events:
        area += level * max(0.0, min(t, hi) - max(last, lo))
        level += step
        peak = max(peak, level)
        last = t
    return peak, area / (hi - lo)


def percentiles(values: np.ndarray) -> str:
    p = np.percentile(values, [50, 90, 99])
    return f"p50 {p[0]:9.2f}  p90 {p[1]:9.2f}  p99 {p[2]:9.2f}  max {values.max():9.2f}"


def report(m: Measurement) -> int:
    """Print the figures; the exit code: 0 targets met, 1 missed, 2 not judged (the machine was busy)."""
    records = m.ledger.sorted_records()
    ok = [r for r in records if r.status == "ok" and len(m.timings.get(r.id, [])) == 2]
    t0 = m.ledger.clock.t0
    sent = np.array([t0 + r.send_s for r in ok])
    first = np.array([t0 + (r.first_token_s or 0.0) for r in ok])
    received, emitted = (np.array([m.timings[r.id][i] for r in ok]) for i in (0, 1))
    client, server = (first - sent) * 1000, (emitted - received) * 1000
    peak, mean = in_flight_profile(records)
    tokens = sum(len(r.token_times_s) for r in records)
    print(f"requests: {len(records)} recorded, {len(ok)} ok with server timings")
    print(f"concurrent streams: peak {peak} (driver saw {m.ledger.stats.max_in_flight}), mean {mean:.0f}")
    print(f"tokens: {tokens} in {m.wall_s:.1f} s ({tokens / m.wall_s:.0f}/s, one SSE chunk each)")
    print(f"CPU: driver {m.driver_cpu_s / m.wall_s:.0%} of a core, {m.driver_cpu_s / tokens * 1e6:.0f} us a token; "
          f"serve-sim {m.server_cpu_s / m.wall_s:.0%}, worst step lateness {float(m.server_lag) * 1000:.1f} ms")  # fmt: skip
    load, cores = os.getloadavg()[0], len(os.sched_getaffinity(0))
    print(f"load average (1 min): {load:.1f} on {cores} cores; waited for a CPU (run queue): driver "
          f"{m.driver_queued_s:.1f} s, serve-sim {m.server_queued_s:.1f} s of {m.wall_s:.0f} s")  # fmt: skip
    print(f"driver loop lag, ms:       {percentiles(np.array(m.probe.lag_ms))}")
    print(f"TTFT ms, driver-measured:  {percentiles(client)}")
    print(f"TTFT ms, server's own:     {percentiles(server)}")
    print(f"added by the driver, ms:   {percentiles(client - server)}")
    print(f"  send -> server app:      {percentiles((received - sent) * 1000)}")
    print(f"  first chunk -> read:     {percentiles((first - emitted) * 1000)}")
    kept = np.array([not r.id.endswith("/0") for r in ok])  # a session's later requests reuse its connection
    print(f"  new connections:         {percentiles((client - server)[~kept])}")
    print(f"  kept-alive connections:  {percentiles((client - server)[kept])}")
    # a freeze, and FREEZE_S after it to catch up, against where the added time is spent (to the app, back)
    windows = [(a, b + FREEZE_S) for a, b in m.probe.freezes + m.server_freezes]
    frozen = _overlaps(sent, received, windows) | _overlaps(emitted, first, windows)
    print(f"freezes over {FREEZE_S * 1000:.0f} ms: driver {len(m.probe.freezes)}, serve-sim "
          f"{len(m.server_freezes)}; requests whose added time overlaps one: {frozen.sum()}")  # fmt: skip
    if frozen.any() and not frozen.all():
        print(f"added, those excluded, ms: {percentiles((client - server)[~frozen])}")
    p99 = float(np.percentile(client - server, 99))
    passed = peak >= 200 and p99 < 5.0 and len(ok) == len(records)
    verdict = "PASS" if passed else "FAIL"
    if load > cores:
        print(f"targets (>= 200 concurrent, added p99 < 5 ms, all ok): NOT JUDGED ({verdict} as measured): "
              f"the load average {load:.1f} is above the {cores} cores, so the added time holds the processes' "
              "waits for a CPU; run it on a quiet machine")  # fmt: skip
        return 2
    print(f"targets (>= 200 concurrent, added p99 < 5 ms, all ok): {verdict}")
    return 0 if passed else 1


def _overlaps(start: np.ndarray, end: np.ndarray, windows: list[tuple[float, float]]) -> np.ndarray:
    """Which [start, end] intervals overlap any of `windows`."""
    hit = np.zeros(start.size, dtype=bool)
    for a, b in windows:
        hit |= (start < b) & (end > a)
    return hit


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sessions", type=int, default=240)
    parser.add_argument("--requests", type=int, default=4, help="requests per session, back to back")
    parser.add_argument("--prompt", type=int, default=512, help="prompt tokens per request")
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--ramp", type=float, default=5.0, help="sessions start within this many seconds")
    parser.add_argument("--kv-tokens", type=int, default=1 << 20)
    parser.add_argument("--batched-tokens", type=int, default=512, help="serve-sim's token budget per step")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, help="also write the run (records, samples, server timings) here")
    parser.add_argument("--serve", type=int, metavar="PORT", help="be the serve-sim child (internal)")
    args = parser.parse_args()
    if args.serve:
        serve(args.serve, args.kv_tokens, args.batched_tokens)
        return
    from flatshare.testing.vllm_server import free_port

    port = free_port()
    command = [sys.executable, __file__, "--serve", str(port)]
    child = subprocess.Popen(
        [*command, "--kv-tokens", str(args.kv_tokens), "--batched-tokens", str(args.batched_tokens)]
    )
    try:
        work = build_workload(args)
        print(f"{args.sessions} sessions x {args.requests} requests, {args.prompt} prompt + "
              f"{args.max_tokens} output tokens; serve-sim in process {child.pid}")  # fmt: skip
        result = run_in_loop(measure(f"http://127.0.0.1:{port}", work, child))
    finally:
        child.terminate()
        child.wait(timeout=30)
    if args.out is not None:
        meta = {
            "driver": "wallclock",
            "benchmark": vars(args) | {"out": str(args.out)},
            "t0": result.ledger.clock.t0,
        }
        write_replay_run(args.out, result.ledger.sorted_records(), result.ledger.samples, meta)
        (args.out / "server_timings.json").write_text(json.dumps(result.timings))
        freezes = {"driver": result.probe.freezes, "server": result.server_freezes}
        (args.out / "freezes.json").write_text(json.dumps(freezes))
    sys.exit(report(result))


if __name__ == "__main__":
    main()
