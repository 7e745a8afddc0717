"""What the admission gateway costs: first-token latency it adds (p50, p99) and the streaming requests
per second it sustains, against going direct to the same backend, side by side in one run. If the Rust
`vllm-router` (PyPI) imports (or `--vllm-router-path DIR` holds it), it is measured as a peer.

Backend: `benchmarks/canned_vllm.py`, a canned vLLM spending microseconds per request, so the
numbers show the proxy, not a model (serve-sim would add its scheduler steps and jitter to both sides).
Client: raw asyncio HTTP/1.1 on keep-alive connections. Gateways run with the default config (threshold
policy, audit log on, /metrics polled every 100 ms), once per upstream client. Backend, gateways, router
and client are separate processes sharing this machine's CPUs.
1. Latency: one request at a time, rotating over the targets so slow moments hit all alike; TTFT is from
   sending the request to receiving the first token event.
2. Throughput: `--concurrency` connections in a closed loop for `--seconds` per target, `--rounds` times:
   completed streams per second (each checked for every token and [DONE]), TTFT under that load, and the
   serving process's CPU time per stream.
Targets: at most 1 ms added at p50 and 5 ms at p99; at least 500 streaming requests/s on 2 cores.

    python benchmarks/gateway_overhead.py [--latency-requests 1000] [--concurrency 32] [--seconds 5]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from flatshare.testing.procstat import cpu_seconds
from flatshare.testing.vllm_server import free_port

BODY = json.dumps({"model": "canned", "prompt": "Say hello to the caller.", "max_tokens": 16, "stream": True})


# -- the client -------------------------------------------------------------------------------------------
class Connection:
    """One keep-alive connection sending streaming completions and timing them."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.request = (
            f"POST /v1/completions HTTP/1.1\r\nhost: 127.0.0.1:{port}\r\ncontent-type: application/json\r\n"
            f"content-length: {len(BODY)}\r\n\r\n{BODY}"
        ).encode()

    async def open(self) -> Connection:
        self.reader, self.writer = await asyncio.open_connection("127.0.0.1", self.port)
        return self

    async def stream(self, tokens: int) -> float:
        """TTFT in seconds of one request; checks every token event and [DONE] arrived."""
        start = time.perf_counter()
        self.writer.write(self.request)
        head = await self.reader.readuntil(b"\r\n\r\n")
        if not head.startswith(b"HTTP/1.1 200"):
            raise RuntimeError(f"bad answer: {head[:200]!r}")
        ttft, events, body = 0.0, 0, b""
        while True:
            size = int((await self.reader.readline()).strip(), 16)
            chunk = await self.reader.readexactly(size + 2)
            if size == 0:
                break
            body += chunk[:-2]
            if not ttft and b'"text"' in chunk:
                ttft = time.perf_counter() - start
        events = body.count(b'"text"')
        if events != tokens or not body.rstrip().endswith(b"data: [DONE]"):
            raise RuntimeError(f"incomplete stream: {events} of {tokens} tokens")
        return ttft


@dataclass
class Samples:
    ttft_ms: list[float] = field(default_factory=list)  # of the requests that completed
    errors: int = 0  # requests that failed or came back incomplete


async def latency(ports: dict[str, int], requests: int, tokens: int) -> dict[str, Samples]:
    """One request at a time, rotating over the targets; a failed request is counted and reconnected."""
    conns = {name: await Connection(port).open() for name, port in ports.items()}
    samples = {name: Samples() for name in ports}
    for _ in range(requests):
        for name, conn in conns.items():
            try:
                samples[name].ttft_ms.append(await conn.stream(tokens) * 1000)
            except (OSError, RuntimeError, ValueError, asyncio.IncompleteReadError):
                samples[name].errors += 1
                conns[name] = await Connection(ports[name]).open()
    return samples


async def throughput(port: int, concurrency: int, seconds: float, tokens: int) -> tuple[float, Samples]:
    """Closed loop on `concurrency` connections for `seconds`: completed streams per second."""
    samples = Samples()
    deadline = time.perf_counter() + seconds

    async def worker() -> None:
        conn = await Connection(port).open()
        while time.perf_counter() < deadline:
            try:
                samples.ttft_ms.append(await conn.stream(tokens) * 1000)
            except (OSError, RuntimeError, ValueError, asyncio.IncompleteReadError):
                samples.errors += 1
                conn = await Connection(port).open()

    start = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return len(samples.ttft_ms) / (time.perf_counter() - start), samples


# -- the processes ----------------------------------------------------------------------------------------
def wait_up(port: int, path: str, proc: subprocess.Popen[bytes], timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while proc.poll() is None and time.monotonic() < deadline:
        with (
            contextlib.suppress(OSError),
            urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=1),
        ):
            return
        time.sleep(0.2)
    raise RuntimeError(f"nothing healthy on port {port} (exit code {proc.poll()})")


@contextmanager
def process(cmd: list[str], port: int, path: str, env: dict[str, str] | None = None) -> Iterator[int]:
    """Run `cmd` (logging to a temporary file, quoted if it fails) until the block ends."""
    log = tempfile.NamedTemporaryFile(prefix=f"bench-{port}-", suffix=".log", delete=False)  # noqa: SIM115
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})})
    try:
        wait_up(port, path, proc)
        yield proc.pid
    except BaseException:
        print(f"--- {cmd[:4]} log ({log.name}) ---\n" + Path(log.name).read_text()[-3000:])
        raise
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def router_env(path: str) -> dict[str, str] | None:
    """PYTHONPATH under which `vllm_router` imports, or None when it does not."""
    env = {"PYTHONPATH": os.pathsep.join(p for p in (path, os.environ.get("PYTHONPATH", "")) if p)}
    check = subprocess.run(
        [sys.executable, "-c", "import vllm_router"], env={**os.environ, **env}, capture_output=True
    )
    return env if check.returncode == 0 else None


Row = dict[str, float]


def summarise(lat: dict[str, Samples], thr: dict[str, list[tuple[float, Samples, float]]]) -> dict[str, Row]:
    """Per target: TTFT p50/p99 alone and added over direct; median streams/s over rounds, loaded TTFT,
    CPU ms per stream of the serving process (for direct: the backend's own)."""
    base = np.asarray(lat["direct"].ttft_ms)
    rows = {}
    for name, samples in lat.items():
        values = np.asarray(samples.ttft_ms)
        rounds = thr[name]
        loaded = np.concatenate([np.asarray(r[1].ttft_ms) for r in rounds])
        rows[name] = {
            "ttft_p50_ms": float(np.percentile(values, 50)),
            "ttft_p99_ms": float(np.percentile(values, 99)),
            "added_p50_ms": float(np.percentile(values, 50) - np.percentile(base, 50)),
            "added_p99_ms": float(np.percentile(values, 99) - np.percentile(base, 99)),
            "streams_per_s": float(np.median([r[0] for r in rounds])),
            "loaded_ttft_p50_ms": float(np.percentile(loaded, 50)),
            "loaded_ttft_p99_ms": float(np.percentile(loaded, 99)),
            "cpu_ms_per_stream": float(np.median([r[2] for r in rounds])),
            "errors": float(samples.errors + sum(r[1].errors for r in rounds)),
        }
    return rows


def report(rows: dict[str, Row], args: argparse.Namespace) -> None:
    print(
        f"\n{args.tokens} token events {args.interval_ms} ms apart per stream; {os.cpu_count()} CPUs shared by all"
    )
    print(f"{'target':<20}{'TTFT p50':>9}{'p99':>7}{'added p50':>10}{'added p99':>10}{'streams/s':>10}"
          f"{'loaded p50':>11}{'p99':>7}{'CPU ms/str':>11}{'errors':>7}")  # fmt: skip
    for name, r in rows.items():
        print(
            f"{name:<20}{r['ttft_p50_ms']:>9.3f}{r['ttft_p99_ms']:>7.2f}{r['added_p50_ms']:>+10.3f}"
            f"{r['added_p99_ms']:>+10.3f}{r['streams_per_s']:>10.0f}{r['loaded_ttft_p50_ms']:>11.2f}"
            f"{r['loaded_ttft_p99_ms']:>7.1f}{r['cpu_ms_per_stream']:>11.3f}{r['errors']:>7.0f}"
        )
    print("TTFT in ms; 'added' is over direct; loaded = under the throughput phase's load")


def measure(ports: dict[str, int], pids: dict[str, int], args: argparse.Namespace) -> dict[str, Row]:
    asyncio.run(latency(ports, 100, args.tokens))  # warm-up
    lat = asyncio.run(latency(ports, args.latency_requests, args.tokens))
    thr: dict[str, list[tuple[float, Samples, float]]] = {name: [] for name in ports}
    for _ in range(args.rounds):
        for name, port in ports.items():
            before = cpu_seconds(pids[name], with_children=True)
            rate, samples = asyncio.run(throughput(port, args.concurrency, args.seconds, args.tokens))
            cpu_ms = (
                (cpu_seconds(pids[name], with_children=True) - before) * 1000 / max(1, len(samples.ttft_ms))
            )
            thr[name].append((rate, samples, cpu_ms))
    return summarise(lat, thr)


def run(args: argparse.Namespace) -> dict[str, Row]:
    workdir = Path(tempfile.mkdtemp(prefix="gateway-bench-"))
    backend, router = free_port(), free_port()
    url = f"http://127.0.0.1:{backend}"
    canned = [str(Path(__file__).with_name("canned_vllm.py")), "--port", str(backend)]
    canned += ["--tokens", str(args.tokens), "--interval-ms", str(args.interval_ms)]
    env = router_env(args.vllm_router_path)
    ports, pids = {"direct": backend}, {}
    with contextlib.ExitStack() as stack:
        pids["direct"] = stack.enter_context(process([sys.executable, *canned], backend, "/health"))
        for client in args.upstream_clients.split(","):
            name, port = f"gateway ({client})", free_port()
            config, audit = workdir / f"gateway-{client}.toml", workdir / f"audit-{client}.jsonl"
            config.write_text(f'port = {port}\naudit_log = "{audit}"\nupstream_client = "{client}"\n')
            cmd = f"-m flatshare.gateway gateway --config {config} --backend {url}"
            pids[name] = stack.enter_context(process([sys.executable, *cmd.split()], port, "/health"))
            ports[name] = port
        if env is not None:
            cmd = f"-m vllm_router.launch_router --worker-urls {url} --port {router} --policy round_robin"
            pids["vllm-router"] = stack.enter_context(
                process([sys.executable, *cmd.split()], router, "/health", env)
            )
            ports["vllm-router"] = router
        else:
            print("vllm-router: not importable (pip install vllm-router, or --vllm-router-path DIR); skipped")
        return measure(ports, pids, args)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--latency-requests", type=int, default=1000, help="sequential requests per target")
    parser.add_argument("--concurrency", type=int, default=32, help="connections in the throughput phase")
    parser.add_argument("--seconds", type=float, default=5.0, help="throughput phase length per target")
    parser.add_argument("--tokens", type=int, default=16, help="token events per stream")
    parser.add_argument("--interval-ms", type=float, default=1.0, help="backend time between token events")
    parser.add_argument(
        "--upstream-clients", default="native,httpx", help="gateway upstream clients to measure"
    )
    parser.add_argument(
        "--vllm-router-path", default="", help="directory holding vllm_router (a pip --target)"
    )
    parser.add_argument("--rounds", type=int, default=2, help="throughput rounds over all targets (median)")
    parser.add_argument("--out", type=Path, help="also write the figures here as JSON")
    args = parser.parse_args()
    rows = run(args)
    report(rows, args)
    if args.out:
        args.out.write_text(
            json.dumps({"settings": vars(args) | {"out": str(args.out)}, "results": rows}, indent=2)
        )


if __name__ == "__main__":
    main()
