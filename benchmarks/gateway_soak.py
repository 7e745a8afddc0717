"""The gateway soaked: a fixed number of streamed requests at a fixed concurrency through
`flatshare gateway` over two `flatshare serve-sim` backends, one backend killed (SIGKILL) and restarted on
the same port on a schedule. Does every request end completed or with a clean error, does the gateway's
memory stay flat, and does the audit log account for every request?

Processes (all on 127.0.0.1, free ports, stopped by pid at the end, on Ctrl-C and on errors too): the
backends (`--speed` virtual seconds per wall second, so a 16-token answer takes milliseconds) and the
gateway (default settings, the audit log in `--out` or a temporary folder). Each request is a streamed
`/v1/completions` or `/v1/chat/completions` (alternating) with a short prompt and `max_tokens` 8-16,
bounded by `--timeout-s`; it carries `x-request-id: soak-<n>` so the audit log can be matched to it.
Kills (`--kill-every 5000`: every 5000 requests sent; `20s`: every 20 s) alternate over the backends,
and only hit a backend while the other is up; the victim is started again `--restart-after` seconds later
and is waited for until the gateway reports it healthy again (at the end, at most `--rejoin-timeout-s`).

Every request is classified as the client saw it (`classify`):
- completed: 200, a stream whose events are JSON, one with a `finish_reason`, ending with `data: [DONE]`;
- clean error: a 4xx/5xx with a JSON `{"error": {...}}` body, or a stream whose last event is an error
  event followed by `data: [DONE]` (how the gateway reports a backend dying mid-stream, docs/gateway.md);
- hang: no complete answer within `--timeout-s`;
- silent truncation: anything else (no `[DONE]`, `[DONE]` with neither a finish nor an error, a broken
  chunked body, a non-JSON error body, a connection the gateway dropped).

Memory: the gateway's resident set (VmRSS, /proc/<pid>/status) before the load, every `--rss-every`
requests and after the last; growth over the second half = (end - middle) / middle.
Audit log: the gateway writes one line per routing decision (docs/gateway.md, "Observability"), so a
request re-sent after its first backend failed has lines for attempt 1, 2, ...; the check is one
attempt-1 line per request sent, none missing (requests refused before routing write none, and this
load sends none such), and total lines = requests + retry lines.

`--misbehaving` adds a broken backend `bad` (`benchmarks/canned_vllm.py --misbehave`, never killed):
every other second its /metrics page holds `+Inf`, an overflowing sum, `NaN` or a 400-digit number,
and its answers cycle through a normal stream, a CRLF-framed stream and no answer at all. The gateway
runs with `backend_limits.first_byte_timeout_s = 1` (`--config` in the out folder), so a request sent
there is retried elsewhere within a second. Figures: `/health` latency through the run (p50, max), and
the bad backend's poll errors by type, whether its poller still runs, and how often it was degraded.
Extra check: its poller is alive at the end (and no request hangs or is truncated, as ever).

Checks (exit status 1 if any fails; 0 when all pass): 0 hangs, 0 silent truncations, the audit log
accounts for every request, RSS growth over the second half under 10%, every killed backend rejoined.

    python benchmarks/gateway_soak.py [--requests 100000] [--concurrency 32] [--kill-every 5000]
        [--restart-after 1] [--misbehaving] [--out DIR] [--json PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, Any

import httpx
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from flatshare.testing.procstat import cpu_seconds, rss_kb
from flatshare.testing.vllm_server import free_port

COMPLETED, CLEAN_ERROR, HANG, TRUNCATION = "completed", "clean_error", "hang", "truncation"
KINDS = (COMPLETED, CLEAN_ERROR, HANG, TRUNCATION)
MAX_REQUESTS = 1_000_000
MAX_CONCURRENCY = 1024
EXAMPLES_PER_KIND = 5
RSS_GROWTH_LIMIT_PCT = 10.0
PROMPTS = (
    "Say hello to the caller.",
    "What is the capital of France?",
    "Name three rivers.",
    "Tell me a short joke.",
)


# -- settings ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Settings:
    """What one soak run does (module docstring); validated on construction."""

    requests: int = 100_000
    concurrency: int = 32
    timeout_s: float = 30.0
    backends: int = 2
    speed: float = 100.0
    kill_every: int = 5000
    kill_unit: str = "requests"  # or "seconds"
    restart_after_s: float = 1.0
    rejoin_timeout_s: float = 120.0
    rss_every: int = 0  # 0: requests // 20 (at least 50)
    out: str = ""
    misbehaving: bool = False

    def __post_init__(self) -> None:
        problems = []
        if not 1 <= self.requests <= MAX_REQUESTS:
            problems.append(f"--requests must be 1..{MAX_REQUESTS}, got {self.requests}")
        if not 1 <= self.concurrency <= MAX_CONCURRENCY:
            problems.append(f"--concurrency must be 1..{MAX_CONCURRENCY}, got {self.concurrency}")
        if not 0 < self.timeout_s <= 600:
            problems.append(f"--timeout-s must be in (0, 600], got {self.timeout_s}")
        if not 2 <= self.backends <= 8:
            problems.append(
                f"--backends must be 2..8 (one is killed while the others serve), got {self.backends}"
            )
        if not 1 <= self.speed <= 10_000:
            problems.append(f"--speed must be 1..10000, got {self.speed}")
        if self.kill_every < 0 or self.kill_unit not in ("requests", "seconds"):
            problems.append(f"--kill-every must be N (requests), Ns (seconds) or 0, got {self.kill_every}")
        if not 0 <= self.restart_after_s <= 600:
            problems.append(f"--restart-after must be 0..600 s, got {self.restart_after_s}")
        if not 0 < self.rejoin_timeout_s <= 3600:
            problems.append(f"--rejoin-timeout-s must be in (0, 3600], got {self.rejoin_timeout_s}")
        if self.rss_every < 0:
            problems.append(f"--rss-every must be >= 0, got {self.rss_every}")
        if problems:
            raise ValueError("; ".join(problems))

    @property
    def rss_interval(self) -> int:
        return self.rss_every or max(50, self.requests // 20)


def kill_schedule(text: str) -> tuple[int, str]:
    """`--kill-every`: `5000` (requests sent), `20s` (seconds), `0` (never)."""
    value, unit = (text[:-1], "seconds") if text.endswith("s") else (text, "requests")
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected N, Ns or 0, got {text!r}") from None
    if number < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {text!r}")
    return number, unit


# -- classifying what a client saw ------------------------------------------------------------------------
def classify(status: int, body: bytes) -> tuple[str, str]:
    """(kind, detail) of one streamed request's answer: its status and its whole body (module docstring)."""
    if status != 200:
        message = _error_message(body)
        if message is None:
            return TRUNCATION, f"{status} without a JSON error body: {body[:120]!r}"
        return CLEAN_ERROR, f"{status}: {message[:160]}"
    payloads = [line[5:].strip() for line in body.split(b"\n") if line.startswith(b"data:")]
    if not payloads or payloads[-1] != b"[DONE]":
        tail = payloads[-1][:120] if payloads else body[:120]
        return TRUNCATION, f"stream ended without [DONE] after {len(payloads)} events (last {tail!r})"
    if payloads.count(b"[DONE]") > 1:
        return TRUNCATION, "more than one [DONE]"
    events = []
    for payload in payloads[:-1]:
        try:
            event = json.loads(payload)
        except ValueError:
            return TRUNCATION, f"an event that is not JSON: {payload[:120]!r}"
        if not isinstance(event, dict):
            return TRUNCATION, f"an event that is not an object: {payload[:120]!r}"
        events.append(event)
    errors = [i for i, event in enumerate(events) if "error" in event]
    if errors:
        message = _error_message(payloads[errors[0]])
        if errors == [len(events) - 1] and message is not None:
            return CLEAN_ERROR, f"error event: {message[:160]}"
        return TRUNCATION, f"error events at {errors} of {len(events)} (not only the last before [DONE])"
    if any(
        isinstance(choice, dict) and choice.get("finish_reason")
        for event in events
        for choice in (event.get("choices") or [])
    ):
        return COMPLETED, ""
    return TRUNCATION, f"[DONE] after {len(events)} events with no finish_reason and no error event"


def _error_message(body: bytes) -> str | None:
    """The message of an OpenAI-style `{"error": {"message": ...}}` body, None if it is not one."""
    try:
        error = json.loads(body)["error"]
    except (ValueError, KeyError, TypeError):
        return None
    if not isinstance(error, dict) or not isinstance(error.get("message"), str):
        return None
    return str(error["message"])


@dataclass
class Tally:
    """Outcomes so far: counts by kind, by route and by backend, a few examples of every failure."""

    counts: Counter[str] = field(default_factory=Counter)
    by_route: Counter[str] = field(default_factory=Counter)
    by_backend: Counter[str] = field(default_factory=Counter)
    examples: dict[str, list[str]] = field(default_factory=lambda: {k: [] for k in KINDS if k != COMPLETED})
    latency_s: list[float] = field(default_factory=list)

    def add(self, index: int, route: str, backend: str, kind: str, detail: str, seconds: float) -> None:
        self.counts[kind] += 1
        self.by_route[f"{route} {kind}"] += 1
        self.by_backend[backend] += 1
        if kind == COMPLETED:
            self.latency_s.append(seconds)
        elif len(self.examples[kind]) < EXAMPLES_PER_KIND:
            self.examples[kind].append(f"soak-{index} {route} via {backend}: {detail}")

    @property
    def done(self) -> int:
        return sum(self.counts.values())


# -- the audit log ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class AuditFigures:
    lines: int  # every line
    decisions: int  # decision lines (no `kind`)
    first_attempts: int  # decision lines with attempt 1
    retries: int  # decision lines with attempt > 1
    missing: int  # requests sent with no attempt-1 line
    duplicated: int  # requests with more than one attempt-1 line
    unreadable: int  # lines that are not JSON objects
    missing_examples: list[str]


def audit_figures(lines: Iterable[str], sent: int) -> AuditFigures:
    """Match the audit log's lines against the requests `soak-0` .. `soak-{sent-1}`."""
    total = decisions = retries = unreadable = 0
    first: Counter[str] = Counter()
    for line in lines:
        total += 1
        try:
            record = json.loads(line)
        except ValueError:
            unreadable += 1
            continue
        if not isinstance(record, dict):
            unreadable += 1
        elif "kind" not in record:
            decisions += 1
            if record.get("attempt") == 1:
                first[str(record.get("request_id"))] += 1
            else:
                retries += 1
    expected = [f"soak-{i}" for i in range(sent)]
    missing = [rid for rid in expected if rid not in first]
    return AuditFigures(
        lines=total,
        decisions=decisions,
        first_attempts=sum(first.values()),
        retries=retries,
        missing=len(missing),
        duplicated=sum(1 for n in first.values() if n > 1),
        unreadable=unreadable,
        missing_examples=missing[:EXAMPLES_PER_KIND],
    )


def line_count(path: Path) -> int:
    with path.open("rb") as handle:
        return sum(chunk.count(b"\n") for chunk in iter(lambda: handle.read(1 << 20), b""))


async def audit_settled(path: Path, at_least: int, timeout_s: float = 10.0) -> None:
    """Wait until the audit log has `at_least` lines and no new line for 0.5 s (it is flushed every 0.1 s),
    at most `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    last, still_since = -1, time.monotonic()
    while time.monotonic() < deadline:
        count = line_count(path) if path.exists() else 0
        if count != last:
            last, still_since = count, time.monotonic()
        elif count >= at_least and time.monotonic() - still_since >= 0.5:
            return
        await asyncio.sleep(0.1)


# -- processes ---------------------------------------------------------------------------------------------
class Children:
    """Every process this run starts, stopped by pid (SIGTERM, then SIGKILL after 15 s) at the end."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.procs: list[subprocess.Popen[bytes]] = []
        self.first: list[subprocess.Popen[bytes]] = []
        self._logs: list[IO[bytes]] = []

    def start(self, cmd: list[str], log_name: str, stop_first: bool = False) -> subprocess.Popen[bytes]:
        log = (self.folder / log_name).open("ab")
        self._logs.append(log)
        # Own process group (no terminal signals), this session: a new session is a CPU group of its own
        # under Linux's autogroup scheduling (see flatshare.testing.vllm_server).
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, process_group=0)
        self.procs.append(proc)
        if stop_first:
            self.first.append(proc)
        return proc

    def stop_all(self) -> None:
        """Stop those started with `stop_first` (the gateway: it drains while its backends still answer),
        then the rest."""
        self._stop(self.first)
        self._stop(self.procs)
        for log in self._logs:
            log.close()

    @staticmethod
    def _stop(procs: list[subprocess.Popen[bytes]]) -> None:
        live = [p for p in procs if p.poll() is None]
        for proc in live:
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + 15
        for proc in live:
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(proc.pid, signal.SIGKILL)
                proc.wait()


@dataclass
class Backend:
    """One serve-sim backend: its name, port and current process."""

    name: str
    port: int
    proc: subprocess.Popen[bytes]
    up: bool = False

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


def sim_command(port: int, speed: float) -> list[str]:
    return [sys.executable, "-m", "flatshare.cli", "serve-sim", "--port", str(port), "--speed", str(speed)]


async def healthy(client: httpx.AsyncClient, url: str) -> bool:
    try:
        return (await client.get(f"{url}/health", timeout=2)).status_code == 200
    except httpx.HTTPError:
        return False


async def wait_healthy(
    client: httpx.AsyncClient, url: str, proc: subprocess.Popen[bytes], timeout_s: float
) -> bool:
    """Until `url` answers /health 200 (True), its process exits or `timeout_s` passes (False)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and proc.poll() is None:
        if await healthy(client, url):
            return True
        await asyncio.sleep(0.2)
    return False


async def gateway_sees(client: httpx.AsyncClient, gateway: str, name: str) -> bool:
    try:
        rows = (await client.get(f"{gateway}/gateway/backends", timeout=2)).json()["backends"]
    except (httpx.HTTPError, ValueError, KeyError, TypeError):
        return False
    return any(row.get("name") == name and row.get("healthy") for row in rows)


# -- the load ----------------------------------------------------------------------------------------------
@dataclass
class Kill:
    backend: str
    at_request: int
    killed_s: float
    restarted_s: float | None = None
    healthy_s: float | None = None  # its own /health answered again
    rejoined_s: float | None = None  # the gateway reported it healthy again
    restart_tries: int = 0


@dataclass
class Run:
    """The state of one soak run that its tasks share."""

    settings: Settings
    gateway: str
    gateway_pid: int
    backends: list[Backend]
    children: Children
    started: float = field(default_factory=time.monotonic)
    sent: int = 0
    tally: Tally = field(default_factory=Tally)
    rss: list[tuple[int, int]] = field(default_factory=list)  # (requests done, kB)
    kills: list[Kill] = field(default_factory=list)
    load_over: asyncio.Event = field(default_factory=asyncio.Event)
    health_ms: list[float] = field(default_factory=list)

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def sample_rss(self) -> None:
        self.rss.append((self.tally.done, rss_kb(self.gateway_pid)))


def request_body(index: int) -> tuple[str, dict[str, Any]]:
    """The route and body of request `index`: completions and chat alternate, max_tokens 8-16."""
    prompt = PROMPTS[index % len(PROMPTS)]
    max_tokens = 8 + (index * 7) % 9
    if index % 2:
        return "/v1/chat/completions", {
            "model": "sim",
            "messages": [{"role": "user", "content": prompt}],
            "max_tokens": max_tokens,
            "stream": True,
        }
    return "/v1/completions", {"model": "sim", "prompt": prompt, "max_tokens": max_tokens, "stream": True}


async def one(client: httpx.AsyncClient, run: Run, index: int) -> None:
    route, body = request_body(index)
    backend, start = "none", time.monotonic()
    try:
        async with asyncio.timeout(run.settings.timeout_s):
            response = await client.post(route, json=body, headers={"x-request-id": f"soak-{index}"})
        backend = response.headers.get("x-flatshare-backend", "none")
        kind, detail = classify(response.status_code, response.content)
    except (TimeoutError, httpx.TimeoutException):
        kind, detail = HANG, f"no complete answer within {run.settings.timeout_s} s"
    except httpx.HTTPError as exc:
        kind, detail = TRUNCATION, f"{type(exc).__name__}: {exc}"
    run.tally.add(index, route, backend, kind, detail, time.monotonic() - start)
    if run.tally.done % run.settings.rss_interval == 0:
        run.sample_rss()


async def load(run: Run, progress: Progress) -> None:
    """`requests` requests from `concurrency` workers, each on its own keep-alive connection (one httpx
    client per worker: httpx's pool scans every connection on each request, which costs more CPU than
    the request itself at 32 connections)."""
    task = progress.add_task("requests", total=run.settings.requests)
    limits = httpx.Limits(max_connections=1, max_keepalive_connections=1)
    timeout = httpx.Timeout(run.settings.timeout_s + 5)

    async def worker() -> None:
        async with httpx.AsyncClient(base_url=run.gateway, limits=limits, timeout=timeout) as client:
            while run.sent < run.settings.requests:
                index = run.sent
                run.sent += 1
                await one(client, run, index)
                progress.update(task, completed=run.tally.done)

    await asyncio.gather(*(worker() for _ in range(run.settings.concurrency)))
    run.load_over.set()


async def killer(run: Run, client: httpx.AsyncClient, rejoins: list[asyncio.Task[None]]) -> None:
    """Kill a backend on the schedule, alternating, only while every backend is up; restart it later."""
    settings = run.settings
    if settings.kill_every == 0:
        return
    while not run.load_over.is_set():
        number = len(run.kills) + 1
        due = run.sent if settings.kill_unit == "requests" else run.elapsed()
        if due < number * settings.kill_every or not all(b.up for b in run.backends):
            await asyncio.sleep(0.02)
            continue
        victim = run.backends[(number - 1) % len(run.backends)]
        victim.up = False
        os.kill(victim.proc.pid, signal.SIGKILL)
        kill = Kill(victim.name, run.sent, round(run.elapsed(), 3))
        run.kills.append(kill)
        while victim.proc.poll() is None:
            await asyncio.sleep(0.01)
        rejoins.append(asyncio.create_task(restart(run, client, victim, kill)))


async def restart(run: Run, client: httpx.AsyncClient, victim: Backend, kill: Kill) -> None:
    """Start the victim again on its port (a few tries: the port may take a moment to free), wait until it
    is healthy and the gateway says so."""
    await asyncio.sleep(run.settings.restart_after_s)
    kill.restarted_s = round(run.elapsed(), 3)
    while True:
        kill.restart_tries += 1
        victim.proc = run.children.start(sim_command(victim.port, run.settings.speed), f"{victim.name}.log")
        if await wait_healthy(client, victim.url, victim.proc, run.settings.rejoin_timeout_s):
            break
        if kill.restart_tries == 3:
            return
        await asyncio.sleep(1.0)
    kill.healthy_s = round(run.elapsed(), 3)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if await gateway_sees(client, run.gateway, victim.name):
            kill.rejoined_s = round(run.elapsed(), 3)
            victim.up = True
            return
        await asyncio.sleep(0.05)


async def soak(run: Run, console: Console) -> dict[str, Any]:
    """The load, the kills, the RSS samples and the audit count; the figures (`figures`)."""
    rejoins: list[asyncio.Task[None]] = []
    async with httpx.AsyncClient() as control:
        run.sample_rss()
        columns = (TextColumn("soak"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
        with Progress(*columns, console=console) as progress:
            run.started = time.monotonic()
            cpu_before = _cpu_now(run)
            kills = asyncio.create_task(killer(run, control, rejoins))
            probe = asyncio.create_task(health_probe(run, control))
            await load(run, progress)
            await probe
            load_s = run.elapsed()
            cpu_after = _cpu_now(run)
            await kills
        run.sample_rss()
        audit_path = Path(run.settings.out) / "audit.jsonl"
        await audit_settled(audit_path, run.settings.requests)
        with audit_path.open(encoding="utf-8") as handle:
            audit = audit_figures(handle, run.sent)
        if rejoins:
            console.print(f"waiting for {sum(not t.done() for t in rejoins)} restarted backend(s) to rejoin")
            await asyncio.wait(rejoins, timeout=run.settings.rejoin_timeout_s + 35)
            for task in rejoins:
                task.cancel()
        bad = await misbehaving_figures(control, run.gateway) if run.settings.misbehaving else None
    cpu = {who: (cpu_after[who] - cpu_before[who]) for who in cpu_before}
    result = figures(run, audit, load_s, cpu)
    if bad is not None:
        result["misbehaving"] = bad
        result["checks"]["the misbehaving backend's poller is alive"] = bad["poller_up"] == 1
        result["passed"] = all(result["checks"].values())
    return result


async def health_probe(run: Run, client: httpx.AsyncClient) -> None:
    """GET /health every 0.1 s while the load runs; its latency in ms (a slow one: the loop was busy)."""
    while not run.load_over.is_set():
        started = time.monotonic()
        with contextlib.suppress(httpx.HTTPError):
            await client.get(f"{run.gateway}/health", timeout=10)
            run.health_ms.append((time.monotonic() - started) * 1000)
        await asyncio.sleep(0.1)


async def misbehaving_figures(client: httpx.AsyncClient, gateway: str) -> dict[str, Any]:
    """What the gateway says of the broken backend `bad` after the load (its /metrics)."""
    from prometheus_client.parser import text_string_to_metric_families

    page = (await client.get(f"{gateway}/metrics", timeout=10)).text
    errors: dict[str, float] = {}
    up = degraded = None
    for family in text_string_to_metric_families(page):
        for sample in family.samples:
            labels = sample.labels
            if sample.name == "flatshare_gateway_task_errors_total" and labels.get("task") == "poll-bad":
                errors[labels["error"]] = sample.value
            elif sample.name == "flatshare_gateway_task_up" and labels.get("task") == "poll-bad":
                up = sample.value
            elif sample.name == "flatshare_gateway_errors_total" and labels.get("kind") == "upstream_timeout":
                degraded = sample.value
    return {"poll_errors": errors, "poller_up": up, "first_byte_timeouts": degraded}


def _cpu_now(run: Run) -> dict[str, float]:
    """CPU seconds so far of the gateway and of this client process (the backends restart, so they are
    left out)."""
    return {"gateway": cpu_seconds(run.gateway_pid), "client": time.process_time()}


# -- figures and checks -------------------------------------------------------------------------------------
def rss_figures(samples: list[tuple[int, int]], requests: int) -> dict[str, Any]:
    """RSS at start (before the load), in the middle (the first sample at or after half the requests)
    and at the end (after the last), and the growth over the second half in %."""
    start, end = samples[0][1], samples[-1][1]
    mid = next(kb for done, kb in samples[1:] if done >= requests / 2)
    return {
        "start_kb": start,
        "mid_kb": mid,
        "end_kb": end,
        "growth_second_half_pct": round((end - mid) / mid * 100, 2),
        "growth_whole_run_pct": round((end - start) / start * 100, 2),
        "samples": samples,
    }


def figures(run: Run, audit: AuditFigures, load_s: float, cpu_s: dict[str, float]) -> dict[str, Any]:
    tally, settings = run.tally, run.settings
    latency = sorted(tally.latency_s)
    rss = rss_figures(run.rss, settings.requests)
    result: dict[str, Any] = {
        "settings": asdict(settings),
        "requests": run.sent,
        "outcomes": {kind: tally.counts[kind] for kind in KINDS},
        "examples": tally.examples,
        "by_route": dict(sorted(tally.by_route.items())),
        "by_backend": dict(sorted(tally.by_backend.items())),
        "load_s": round(load_s, 2),
        "requests_per_s": round(run.sent / load_s, 1),
        "completed_latency_ms": {
            "p50": round(latency[len(latency) // 2] * 1000, 2) if latency else None,
            "p99": round(latency[int(len(latency) * 0.99)] * 1000, 2) if latency else None,
        },
        "cpu_ms_per_request": {who: round(s * 1000 / max(1, run.sent), 3) for who, s in cpu_s.items()},
        "kills": [asdict(kill) for kill in run.kills],
        "rss": rss,
        "audit": asdict(audit),
        "gateway_log_tracebacks": _tracebacks(Path(settings.out) / "gateway.log"),
        "health_ms": _health_figures(run.health_ms),
    }
    result["checks"] = checks(result)
    result["passed"] = all(result["checks"].values())
    return result


def _health_figures(samples: list[float]) -> dict[str, Any]:
    ordered = sorted(samples)
    if not ordered:
        return {"samples": 0, "p50": None, "max": None}
    return {
        "samples": len(ordered),
        "p50": round(ordered[len(ordered) // 2], 2),
        "max": round(ordered[-1], 2),
    }


def checks(result: dict[str, Any]) -> dict[str, bool]:
    """The soak's acceptance checks on a run's figures, plus that every request was classified and
    every killed backend rejoined."""
    outcomes, audit, requests = result["outcomes"], result["audit"], result["requests"]
    return {
        "every request classified": sum(outcomes.values()) == requests,
        "0 hangs": outcomes[HANG] == 0,
        "0 silent truncations": outcomes[TRUNCATION] == 0,
        "audit: one attempt-1 line per request": audit["first_attempts"] == requests
        and audit["missing"] == 0
        and audit["duplicated"] == 0
        and audit["unreadable"] == 0,
        "audit: lines = requests + retries": audit["lines"] == requests + audit["retries"],
        f"RSS growth over the second half < {RSS_GROWTH_LIMIT_PCT:g}%": result["rss"][
            "growth_second_half_pct"
        ]
        < RSS_GROWTH_LIMIT_PCT,
        "every killed backend rejoined": all(kill["rejoined_s"] is not None for kill in result["kills"]),
    }


def _tracebacks(log: Path) -> int:
    return log.read_text(errors="replace").count("Traceback (most recent call last)") if log.exists() else 0


def report(result: dict[str, Any], console: Console) -> None:
    table = Table(title="gateway soak", show_header=False)
    table.add_column("figure")
    table.add_column("value", justify="right")
    outcomes, rss, audit = result["outcomes"], result["rss"], result["audit"]
    settings = result["settings"]
    table.add_row("requests", f"{result['requests']} at concurrency {settings['concurrency']}")
    for kind in KINDS:
        table.add_row(kind.replace("_", " "), str(outcomes[kind]))
    table.add_row(
        "kills (rejoined)",
        f"{len(result['kills'])} ({sum(k['rejoined_s'] is not None for k in result['kills'])})",
    )
    table.add_row("by backend", ", ".join(f"{k} {v}" for k, v in result["by_backend"].items()))
    table.add_row("load time", f"{result['load_s']:.1f} s")
    table.add_row("requests/s", f"{result['requests_per_s']:.0f}")
    cpu = result["cpu_ms_per_request"]
    table.add_row("CPU ms per request: gateway / client", f"{cpu['gateway']:.2f} / {cpu['client']:.2f}")
    latency = result["completed_latency_ms"]
    table.add_row("completed latency p50 / p99", f"{latency['p50']} / {latency['p99']} ms")
    table.add_row(
        "gateway RSS start / mid / end",
        f"{rss['start_kb'] / 1024:.1f} / {rss['mid_kb'] / 1024:.1f} / {rss['end_kb'] / 1024:.1f} MiB",
    )
    table.add_row("RSS growth, second half", f"{rss['growth_second_half_pct']:+.2f}%")
    table.add_row(
        "audit lines (attempt 1 / retries)",
        f"{audit['lines']} ({audit['first_attempts']} / {audit['retries']})",
    )
    table.add_row("audit: requests missing", str(audit["missing"]))
    table.add_row("gateway log tracebacks", str(result["gateway_log_tracebacks"]))
    health = result["health_ms"]
    table.add_row("/health latency p50 / max", f"{health['p50']} / {health['max']} ms ({health['samples']})")
    bad = result.get("misbehaving")
    if bad is not None:
        errors = ", ".join(f"{k} {v:.0f}" for k, v in sorted(bad["poll_errors"].items())) or "none"
        table.add_row("misbehaving backend: poll errors", errors)
        table.add_row(
            "misbehaving backend: poller up / first-byte timeouts",
            f"{bad['poller_up']} / {bad['first_byte_timeouts']}",
        )
    console.print(table)
    for kind, examples in result["examples"].items():
        for example in examples:
            console.print(f"  {kind}: {example}", markup=False, highlight=False, soft_wrap=True)
    for name, ok in result["checks"].items():
        console.print(f"[{'green' if ok else 'red'}]{'pass' if ok else 'FAIL'}[/] {name}")


# -- main --------------------------------------------------------------------------------------------------
@contextmanager
def stopping_on_sigterm() -> Iterator[None]:
    """SIGTERM ends the run like Ctrl-C, so the processes it started are stopped."""

    def handler(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def start_fleet(settings: Settings, children: Children, console: Console) -> tuple[list[Backend], str, int]:
    """Start the backends and the gateway; wait until the gateway reports every backend healthy."""
    folder = Path(settings.out)
    backends = []
    for i in range(settings.backends):
        port = free_port()
        backends.append(
            Backend(f"b{i}", port, children.start(sim_command(port, settings.speed), f"b{i}.log"))
        )
    gateway_port = free_port()
    cmd = [sys.executable, "-m", "flatshare.gateway", "gateway", "--port", str(gateway_port)]
    cmd += ["--audit-log", str(folder / "audit.jsonl")]
    for backend in backends:
        cmd += ["--backend", f"{backend.name}={backend.url}"]
    if settings.misbehaving:
        bad_port = free_port()
        canned = [sys.executable, str(Path(__file__).with_name("canned_vllm.py")), "--port", str(bad_port)]
        children.start([*canned, "--misbehave", "--tokens", "12", "--model", "sim"], "bad.log")
        config = folder / "gateway.toml"
        config.write_text("[backend_limits]\nfirst_byte_timeout_s = 1.0\ndegraded_retry_s = 2.0\n")
        cmd += ["--backend", f"bad=http://127.0.0.1:{bad_port}", "--config", str(config)]
    gateway = children.start(cmd, "gateway.log", stop_first=True)
    url = f"http://127.0.0.1:{gateway_port}"

    async def up() -> None:
        async with httpx.AsyncClient() as client:
            for backend in backends:
                if not await wait_healthy(client, backend.url, backend.proc, 180):
                    raise RuntimeError(
                        f"backend {backend.name} did not start (see {folder}/{backend.name}.log)"
                    )
            if not await wait_healthy(client, url, gateway, 60):
                raise RuntimeError(f"the gateway did not start (see {folder}/gateway.log)")
            deadline = time.monotonic() + 30
            while not all([await gateway_sees(client, url, b.name) for b in backends]):
                if time.monotonic() > deadline:
                    raise RuntimeError("the gateway did not see every backend healthy within 30 s")
                await asyncio.sleep(0.1)

    console.print(f"starting {settings.backends} serve-sim backends and the gateway (logs in {folder})")
    asyncio.run(up())
    for backend in backends:
        backend.up = True
    return backends, url, gateway.pid


def run_soak(settings: Settings, console: Console) -> dict[str, Any]:
    children = Children(Path(settings.out))
    try:
        backends, url, pid = start_fleet(settings, children, console)
        wall = time.monotonic()

        async def go() -> dict[str, Any]:
            return await soak(Run(settings, url, pid, backends, children), console)

        result = asyncio.run(go())
        result["soak_wall_s"] = round(time.monotonic() - wall, 2)
        return result
    finally:
        children.stop_all()


def parse_args(argv: list[str] | None = None) -> tuple[Settings, Path | None]:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--requests", type=int, default=100_000, help=f"requests to send (at most {MAX_REQUESTS})"
    )
    parser.add_argument("--concurrency", type=int, default=32, help="requests in flight at once")
    parser.add_argument(
        "--timeout-s", type=float, default=30.0, help="a request not answered whole by then hangs"
    )
    parser.add_argument("--backends", type=int, default=2, help="serve-sim backends (at least 2)")
    parser.add_argument(
        "--speed", type=float, default=100.0, help="serve-sim virtual seconds per wall second"
    )
    parser.add_argument(
        "--kill-every",
        type=kill_schedule,
        default=(5000, "requests"),
        help="N requests, Ns seconds, or 0: never",
    )
    parser.add_argument("--restart-after", type=float, default=1.0, help="seconds from a kill to the restart")
    parser.add_argument(
        "--rejoin-timeout-s", type=float, default=120.0, help="bound on a restart becoming healthy"
    )
    parser.add_argument(
        "--rss-every", type=int, default=0, help="sample RSS every N requests (0: requests/20)"
    )
    parser.add_argument(
        "--out", type=Path, help="folder for the audit log and process logs (default: a temp one)"
    )
    parser.add_argument("--json", type=Path, help="write the figures here as JSON")
    parser.add_argument(
        "--misbehaving", action="store_true", help="add a broken backend (bad metrics, hangs, CRLF streams)"
    )
    args = parser.parse_args(argv)
    out = args.out or Path(tempfile.mkdtemp(prefix="gateway-soak-"))
    out.mkdir(parents=True, exist_ok=True)
    if (out / "audit.jsonl").exists():
        parser.error(f"{out / 'audit.jsonl'} exists: the audit count needs a fresh file")
    every, unit = args.kill_every
    try:
        settings = Settings(
            requests=args.requests,
            concurrency=args.concurrency,
            timeout_s=args.timeout_s,
            backends=args.backends,
            speed=args.speed,
            kill_every=every,
            kill_unit=unit,
            restart_after_s=args.restart_after,
            rejoin_timeout_s=args.rejoin_timeout_s,
            rss_every=args.rss_every,
            out=str(out),
            misbehaving=args.misbehaving,
        )
    except ValueError as exc:
        parser.error(str(exc))
    return settings, args.json


def main(argv: list[str] | None = None) -> int:
    settings, json_path = parse_args(argv)
    console = Console()
    try:
        with stopping_on_sigterm():
            result = run_soak(settings, console)
    except KeyboardInterrupt:
        console.print(f"interrupted: every process it started is stopped; files in {settings.out}")
        return 130
    report(result, console)
    console.print(f"soak wall time {result['soak_wall_s']:.1f} s; files in {settings.out}")
    if json_path is not None:
        json_path.write_text(json.dumps(result, indent=2) + "\n")
    return 0 if result["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
