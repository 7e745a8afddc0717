"""`flatshare replay`: a workload against endpoints (wall clock) or simulated engines (`--sim`).

`replay_command` is the whole command with plain arguments; the CLI maps its options onto it and turns
`InputError` into a one-line error (exit 2). It writes `OUT/requests.jsonl`, `OUT/samples.jsonl` and
`OUT/run.json` (docs/records.md). Ctrl-C during a wall-clock run still writes the three files: every
request sent so far, the unfinished ones as failed with error `interrupted`.

Prompts are clipped to the max model length (`--max-model-len`; 0: for `--sim` the engine's, for
endpoints the smallest that their `/v1/models` report) and drawn from a vocabulary of `vocab_size` ids,
so the same spec, seed, length and vocabulary give identical requests for both drivers.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime
import gc
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from flatshare import enginelog, httpclient
from flatshare.errors import InputError
from flatshare.replay.endpoints import Endpoint, discover, normalize_url
from flatshare.replay.ledger import Ledger
from flatshare.replay.progress import NullProgress, ReplayProgress
from flatshare.replay.wallclock import WallClockOptions, run_in_loop, run_wallclock
from flatshare.runfiles.files import prepare
from flatshare.runfiles.run import write_replay_run
from flatshare.sim.options import EngineOptions
from flatshare.workloads.model import Workload
from flatshare.workloads.spec import check_spec, parse_spec
from flatshare.workloads.tokens import DEFAULT_VOCAB


@dataclass(frozen=True)
class ReplaySummary:
    """What `replay_command` did: the run.json it wrote, and whether Ctrl-C cut it short."""

    out: Path
    run: dict[str, Any] = field(default_factory=dict)
    interrupted: bool = False

    def line(self) -> str:
        statuses = ", ".join(f"{n} {status}" for status, n in self.run.get("statuses", {}).items())
        cut = " (interrupted: partial records)" if self.interrupted else ""
        return (
            f"replayed {self.run.get('requests', 0)} requests ({statuses or 'none'}){cut}; wrote {self.out}/"
        )


def replay_command(
    workload: str,
    out: Path,
    *,
    endpoints: Sequence[str] = (),
    sim: bool = False,
    seed: int = 0,
    duration: float = 0.0,
    max_concurrency: int = 256,
    grace: float = 30.0,
    max_model_len: int | None = None,
    vocab_size: int = DEFAULT_VOCAB,
    priority: bool = True,
    sim_engines: int = 1,
    engine: EngineOptions | None = None,
    show_progress: bool = True,
) -> ReplaySummary:
    """Replay `workload` (a spec, see `flatshare.workloads.spec`) and write `out`; InputError on bad input.

    `engine` holds the `--sim` engines' settings (`flatshare.sim.options`; default: `EngineConfig`'s);
    `max_model_len`, when given, replaces theirs. With `--sim`, vLLM's log records go to OUT/engine.log
    (`flatshare.enginelog`)."""
    if bool(endpoints) == sim:
        raise InputError("give --endpoint URL (one or more) or --sim, not both and not neither")
    if duration < 0 or grace < 0 or (max_model_len is not None and max_model_len < 1):
        raise InputError("--duration and --grace must be >= 0, and --max-model-len >= 1")
    urls = [normalize_url(url) for url in endpoints]
    check_spec(workload)  # malformed or too large: refused before OUT is made
    prepare(out)
    meta: dict[str, Any] = {
        "spec": workload,
        "seed": seed,
        "duration_s": duration or None,
        "vocab_size": vocab_size,
        "started_at": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
    }
    if sim:
        return _replay_sim(
            workload, out, meta, max_model_len, sim_engines, engine or EngineOptions(), grace, show_progress
        )
    try:
        options = WallClockOptions(max_concurrency, duration or None, grace, send_priority=priority)
    except ValueError as exc:
        raise InputError(str(exc)) from exc
    run: dict[str, Any] = {}
    try:
        run_in_loop(_replay_endpoints(workload, urls, out, meta, max_model_len, options, show_progress, run))
    except KeyboardInterrupt:
        if not run:
            raise
        return ReplaySummary(out, run, interrupted=True)
    return ReplaySummary(out, run)


def load_workload(spec: str, seed: int, max_model_len: int | None, vocab_size: int) -> Workload:
    """The workload both drivers replay (InputError on a bad spec, file or vocabulary)."""
    try:
        return parse_spec(spec, seed, max_model_len=max_model_len, vocab_size=vocab_size)
    except InputError:
        raise
    except ValueError as exc:
        raise InputError(f"workload spec {spec!r}: {exc}") from exc


async def _replay_endpoints(
    spec: str,
    urls: Sequence[str],
    out: Path,
    meta: dict[str, Any],
    max_model_len: int | None,
    options: WallClockOptions,
    show_progress: bool,
    run: dict[str, Any],
) -> None:
    async with httpclient.async_client(httpx.Timeout(10.0, connect=5.0)) as client:
        endpoints: list[Endpoint] = list(await asyncio.gather(*(discover(client, url) for url in urls)))
    lengths = [e.max_model_len for e in endpoints if e.max_model_len]
    clip = max_model_len if max_model_len is not None else (min(lengths) if lengths else None)
    workload = load_workload(spec, meta["seed"], clip, meta["vocab_size"])
    meta |= _workload_meta(workload, clip, "wallclock")
    meta |= {"endpoints": [e.to_json() for e in endpoints], "options": dataclasses.asdict(options)}
    ledger = Ledger()
    gc.collect()
    gc.freeze()  # the workload stays alive all run: keep it out of full collections (loop pauses)
    total, unit = (options.duration_s, "s") if options.duration_s else (workload.n_requests, "requests")
    started = time.perf_counter()
    with _progress(show_progress, "replay", total, unit) as progress:
        ticker = asyncio.create_task(_tick(lambda: progress.wallclock(ledger)))
        interrupted = True
        try:
            await run_wallclock(workload, endpoints, ledger, options)
            interrupted = False
        finally:
            ticker.cancel()
            progress.wallclock(ledger)
            meta |= {"wall_s": round(time.perf_counter() - started, 3), "interrupted": interrupted}
            meta["stats"] = ledger.stats.to_json()
            run |= write_replay_run(out, ledger.sorted_records(), ledger.samples, meta)


async def _tick(update: Callable[[], None], interval_s: float = 0.5) -> None:
    while True:
        update()
        await asyncio.sleep(interval_s)


def _replay_sim(
    spec: str,
    out: Path,
    meta: dict[str, Any],
    max_model_len: int | None,
    n_engines: int,
    o: EngineOptions,
    grace_s: float,
    show_progress: bool,
) -> ReplaySummary:
    if n_engines < 1:
        raise InputError(f"--sim-engines must be >= 1, got {n_engines}")
    if max_model_len is not None:
        o = dataclasses.replace(o, max_model_len=max_model_len)
    config, profile = o.build()
    workload = load_workload(spec, meta["seed"], config.max_model_len, meta["vocab_size"])
    from flatshare.replay.virtual import run_virtual  # imports vLLM: after the input is checked
    from flatshare.sim.engine import SimEngine

    meta |= _workload_meta(workload, config.max_model_len, "virtual")
    engines = [SimEngine(config, profile) for _ in range(n_engines)]
    enginelog.log_to(out)
    until = meta["duration_s"]
    stop = None if until is None else until + grace_s  # as the wall-clock driver cuts its run
    started = time.perf_counter()
    with _progress(show_progress, "replay (virtual s)", until, "s") as progress:
        result = run_virtual(workload, engines, until_s=until, on_progress=progress.virtual, stop_s=stop)
        progress.virtual(max(e.now for e in engines), force=True)
    meta |= {
        "wall_s": round(time.perf_counter() - started, 3),
        "interrupted": False,
        "engine": config.to_json(),
        "profile": profile.name,
        "engines": n_engines,
        "grace_s": grace_s,
        "virtual_s": round(max(e.now for e in engines), 6),
    }
    return ReplaySummary(out, write_replay_run(out, result.records, result.samples, meta))


def _workload_meta(workload: Workload, clip: int | None, driver: str) -> dict[str, Any]:
    return {
        "driver": driver,
        "workload": workload.name,
        "workload_requests": workload.n_requests,
        "max_model_len": clip,
    }


@contextlib.contextmanager
def _progress(show: bool, label: str, total: float | None, unit: str) -> Iterator[NullProgress]:
    with ReplayProgress(label, total, unit) if show else NullProgress() as progress:
        yield progress
