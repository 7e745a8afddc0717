"""The two sides of a fidelity run: one workload against the real server, and through the simulator.

Real side: the wall-clock replay driver (`flatshare.replay.command.replay_command`) against the
server, after clearing its prefix cache (so a second real run does not find the first one's prompts
cached): sequential requests of unique tokens, together more than the cache holds, push every cached
block out. `/metrics` is read before and after, for the exact preemption count and the server's own
means of time to first token, inter-token latency and end-to-end latency (vLLM measures these in its
API server from the engine's step timestamps, before the HTTP response: the client-side minus the
server-side figure is what the HTTP path adds).

Simulated side: the virtual driver (`flatshare.replay.virtual.run_virtual`) on one `SimEngine` with
the same engine settings and the same seeded workload. Both write a replay folder (records, samples,
run.json) that analysis and `--real-from` read back.
"""

from __future__ import annotations

import asyncio
import json
import math
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from flatshare import httpclient
from flatshare.fidelity.measures import RunMetrics, run_metrics
from flatshare.fidelity.probes import ServerInfo, histogram, metric, scrape, stream_completion, unique_prompt
from flatshare.replay.command import load_workload, replay_command
from flatshare.runfiles.records import ReplayRecord, read_records
from flatshare.runfiles.run import REQUESTS, RUN, SAMPLES, write_replay_run
from flatshare.runfiles.samples import read_samples
from flatshare.sim.config import EngineConfig
from flatshare.sim.profile import StepTimeProfile

SERVER_HISTOGRAMS = {
    "ttft": "vllm:time_to_first_token_seconds",
    "itl": "vllm:inter_token_latency_seconds",
    "e2e": "vllm:e2e_request_latency_seconds",
    "queue": "vllm:request_queue_time_seconds",
}
EXTRA = "fidelity_run.json"


@dataclass(frozen=True)
class RunData:
    """One run's folder, records and metrics; `server_means` (seconds) only for a real run."""

    name: str
    folder: Path
    records: list[ReplayRecord]
    metrics: RunMetrics
    server_means: dict[str, float]


async def clear_prefix_cache(info: ServerInfo, vocab_size: int, seed: int) -> int:
    """Push every cached block out with unique one-token-output requests; returns how many were sent."""
    length = info.max_model_len - 1
    per_request = math.ceil(length / info.block_size)
    n = math.ceil((info.num_gpu_blocks - 1) / per_request) + 1
    rng = random.Random(f"flush-{seed}")
    async with httpclient.async_client(httpx.Timeout(120.0, connect=10.0)) as client:
        for _ in range(n):
            await stream_completion(client, info, unique_prompt(rng, length, vocab_size), 1)
    return n


async def _snapshot(url: str) -> str:
    async with httpclient.async_client(httpx.Timeout(30.0, connect=10.0)) as client:
        return await scrape(client, url)


def _server_delta(before: str, after: str) -> tuple[int, dict[str, float]]:
    preempted = (metric(after, "vllm:num_preemptions_total") or 0) - (
        metric(before, "vllm:num_preemptions_total") or 0
    )
    means = {}
    for key, name in SERVER_HISTOGRAMS.items():
        (s0, c0), (s1, c1) = histogram(before, name), histogram(after, name)
        if c1 > c0:
            means[key] = round((s1 - s0) / (c1 - c0), 6)
    return round(preempted), means


def run_real(
    name: str, folder: Path, info: ServerInfo, spec: str, seed: int, vocab_size: int, show_progress: bool
) -> RunData:
    """Replay `spec` against the server in wall-clock time (see the module docstring)."""
    asyncio.run(clear_prefix_cache(info, vocab_size, seed))
    before = asyncio.run(_snapshot(info.url))
    replay_command(
        spec,
        folder,
        endpoints=[info.url],
        seed=seed,
        max_model_len=info.max_model_len,
        vocab_size=vocab_size,
        show_progress=show_progress,
    )
    after = asyncio.run(_snapshot(info.url))
    preemptions, means = _server_delta(before, after)
    (folder / EXTRA).write_text(json.dumps({"preemptions": preemptions, "server_means": means}, indent=2))
    return read_run(name, folder)


def run_sim(
    name: str,
    folder: Path,
    config: EngineConfig,
    profile: StepTimeProfile,
    spec: str,
    seed: int,
    vocab_size: int,
) -> RunData:
    """Replay `spec` through the simulated engine in virtual time."""
    from flatshare.replay.virtual import run_virtual
    from flatshare.sim.engine import SimEngine

    workload = load_workload(spec, seed, config.max_model_len, vocab_size)
    engine = SimEngine(config, profile)
    result = run_virtual(workload, [engine])
    meta: dict[str, Any] = {
        "spec": spec,
        "seed": seed,
        "vocab_size": vocab_size,
        "driver": "virtual",
        "workload": workload.name,
        "workload_requests": workload.n_requests,
        "max_model_len": config.max_model_len,
        "duration_s": None,
        "engine": config.to_json(),
        "profile": profile.name,
        "engines": 1,
        "virtual_s": round(engine.now, 6),
    }
    write_replay_run(folder, result.records, result.samples, meta)
    extra = {
        "preemptions": engine.preemptions,
        "server_means": {},
        "counters": result.scheduler_counters,
    }
    (folder / EXTRA).write_text(json.dumps(extra, indent=2))
    return read_run(name, folder)


def read_run(name: str, folder: Path) -> RunData:
    """A run folder written by `run_real` or `run_sim`, read back."""
    records = read_records(folder / REQUESTS)
    samples = [s for _, s in read_samples(folder / SAMPLES)]
    extra = json.loads((folder / EXTRA).read_text())
    metrics = run_metrics(records, samples, int(extra["preemptions"]))
    return RunData(name, folder, records, metrics, dict(extra["server_means"]))


def run_meta(folder: Path) -> dict[str, Any]:
    return dict(json.loads((folder / RUN).read_text()))
