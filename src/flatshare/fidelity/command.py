"""`flatshare calibrate-engine` and `flatshare fidelity`: the command bodies, with plain arguments.

The CLI maps its options onto these functions and turns `InputError` into a one-line error (exit 2).
"""

from __future__ import annotations

import asyncio
import json
import os
import shlex
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from flatshare import enginelog, httpclient
from flatshare.errors import InputError
from flatshare.fidelity.calibrate import CalibrationPlan, check_kv, run_probes
from flatshare.fidelity.compare import Bounds, compare
from flatshare.fidelity.fit import Probe, fit_probes
from flatshare.fidelity.measures import means
from flatshare.fidelity.probes import ServerInfo, server_info
from flatshare.fidelity.profile_file import build_profile, write_profile
from flatshare.fidelity.report import FidelityResult, write_report
from flatshare.fidelity.runs import read_run, run_real, run_sim
from flatshare.fidelity.settings import PROBE_VOCAB_SIZE, EngineSettings
from flatshare.runfiles.files import prepare
from flatshare.sim.config import DEFAULT_ENGINE
from flatshare.sim.profile import StepTimeProfile

# A smaller plan for tests and a first look: fewer shapes, 3 rounds (about 15 s on the tiny model).
QUICK_PLAN = CalibrationPlan(
    prefill_lengths=(32, 512, 2000),
    decode_batches=(1, 8),
    decode_contexts=(64, 1024),
    decode_tokens=64,
    beside_lengths=(1024,),
    repeats=3,
)


@dataclass(frozen=True)
class CalibrationSummary:
    profile: StepTimeProfile
    out: Path
    wall_s: float

    def line(self) -> str:
        fit = self.profile.fit or {}
        kv = (fit.get("kv_check") or {}).get("ok")
        return (
            f"calibrated {self.profile.name}: step {self.profile.step_fixed_s * 1e3:.2f} ms + "
            f"{self.profile.prefill_token_s * 1e6:.2f} us/prefill token + "
            f"{self.profile.decode_token_s * 1e6:.2f} us/decode token; {fit.get('probes')} probes, median "
            f"|error| {fit.get('median_abs_rel_error', 0):.1%}, worst {fit.get('max_abs_rel_error', 0):.1%}; "
            f"KV check {'ok' if kv else 'FAILED'}; {self.wall_s:.0f} s; wrote {self.out}"
        )


def calibrate_engine_command(
    endpoint: str,
    out: Path,
    *,
    max_num_batched_tokens: int = DEFAULT_ENGINE.max_num_batched_tokens,
    vocab_size: int = PROBE_VOCAB_SIZE,
    repeats: int = 5,
    quick: bool = False,
    name: str = "",
    kv_bytes_per_token: int = 0,
    seed: int = 0,
    on_progress: Callable[[str], None] | None = None,
) -> CalibrationSummary:
    """Probe the vLLM server at `endpoint`, fit the step-time model, write the profile to `out`.

    `max_num_batched_tokens` must be the server's (vLLM does not export it); `vocab_size` bounds the
    random prompt ids (at most the model's vocabulary). InputError on bad input or an unusable server.
    """
    from flatshare.sim.profile import check_not_shipped

    if out.suffix != ".json":
        raise InputError(f"--out {out}: a profile file must end in .json")
    check_not_shipped(out)
    if min(max_num_batched_tokens, vocab_size, repeats) < 1 or vocab_size < 8:
        raise InputError("--max-num-batched-tokens, --repeats must be >= 1 and --vocab-size >= 8")
    base = QUICK_PLAN if quick else CalibrationPlan()
    try:
        plan = CalibrationPlan(
            **{
                **base.__dict__,
                "max_num_batched_tokens": max_num_batched_tokens,
                "vocab_size": vocab_size,
                "repeats": base.repeats if quick else repeats,
                "seed": seed,
            }
        )
    except ValueError as exc:
        raise InputError(f"calibration plan: {exc}") from exc
    command = shlex.join(
        ["flatshare", "calibrate-engine", "--endpoint", endpoint, "--out", str(out)]
        + ["--max-num-batched-tokens", str(max_num_batched_tokens), "--vocab-size", str(vocab_size)]
        + (["--quick"] if quick else ["--repeats", str(repeats)])
        + (["--seed", str(seed)] if seed else [])
    )
    started = time.perf_counter()
    load_before = os.getloadavg()
    info, probes, kv = asyncio.run(_calibrate(endpoint, plan, on_progress))
    fit = fit_probes(probes)
    try:
        profile = build_profile(
            name or out.stem, fit, info, plan, kv, command, (load_before, os.getloadavg()), kv_bytes_per_token
        )
    except ValueError as exc:
        raise InputError(str(exc)) from exc
    write_profile(profile, out)
    return CalibrationSummary(profile, out, time.perf_counter() - started)


async def _calibrate(
    endpoint: str, plan: CalibrationPlan, on_progress: Callable[[str], None] | None
) -> tuple[ServerInfo, list[Probe], dict[str, Any]]:
    timeout = httpx.Timeout(120.0, connect=10.0)
    async with httpclient.async_client(timeout, max_connections=64) as client:
        info = await server_info(client, endpoint)
        if on_progress:
            on_progress("KV capacity check")
        try:
            kv = await check_kv(client, info, plan)
            probes = await run_probes(client, info, plan, on_progress)
        except (httpx.HTTPError, RuntimeError) as exc:
            # httpx's timeouts carry no message: name the exception so the error says what happened
            raise InputError(
                f"calibration against {info.url} failed: {type(exc).__name__} {exc}".rstrip()
            ) from exc
    return info, probes, kv


@dataclass(frozen=True)
class FidelitySummary:
    out: Path
    result: FidelityResult

    def line(self) -> str:
        worst = self.result.worst()
        text = "within bounds" if self.result.verdict else "OUT OF BOUNDS"
        if worst is not None:
            text += f"; worst {worst.cls} {worst.quantity} {worst.sim_error:+.0%} (bound {worst.bound:.0%})"
        return f"fidelity {self.result.meta['scheduler']}: {text}; wrote {self.out}/report.md"


def fidelity_command(
    endpoint: str,
    profile: str,
    workload: str,
    out: Path,
    *,
    scheduler: str = DEFAULT_ENGINE.scheduler,
    make_room: str = "",
    policy: str = DEFAULT_ENGINE.policy,
    block_size: int = 0,
    kv_blocks: int = 0,
    max_num_batched_tokens: int = DEFAULT_ENGINE.max_num_batched_tokens,
    max_num_seqs: int = DEFAULT_ENGINE.max_num_seqs,
    max_model_len: int = 0,
    seed: int = 0,
    vocab_size: int = PROBE_VOCAB_SIZE,
    real_runs: int = 2,
    real_from: Path | None = None,
    floor: float = 0.15,
    k: float = 2.0,
    on_progress: Callable[[str], None] | None = None,
) -> FidelitySummary:
    """Replay `workload` against the server at `endpoint` `real_runs` times (or read the real runs saved
    in `real_from`) and once through the simulator with `profile` and the same engine settings (0: the
    server's), compare, and write `out`/fidelity.json, report.md, cdf.png. InputError on bad input."""
    from flatshare.sim.profile import load_profile

    say = on_progress or (lambda _: None)
    if bool(endpoint) == (real_from is not None):
        raise InputError("give exactly one of --endpoint URL or --real-from DIR (saved real runs)")
    if real_runs < 1:
        raise InputError(f"--real-runs must be >= 1, got {real_runs}")
    try:
        bounds = Bounds(floor, k)
    except ValueError as exc:
        raise InputError(str(exc)) from exc
    step_profile = load_profile(profile)  # a shipped name or a file: checked before the server is asked
    info = _saved_server(real_from) if real_from is not None else asyncio.run(_server(endpoint))
    settings = EngineSettings(block_size, kv_blocks, max_num_batched_tokens, max_num_seqs, max_model_len)
    config, mismatches = settings.config(info, scheduler, policy, make_room)
    prepare(out)
    enginelog.log_to(out)
    if real_from is not None:
        real = [read_run(f.name, f) for f in sorted(real_from.glob("real-*")) if f.is_dir()]
        if not real:
            raise InputError(f"--real-from {real_from}: no real-* run folders")
    else:
        real = []
        for i in range(1, real_runs + 1):
            say(f"real run {i}/{real_runs} against {info.url}")
            real.append(run_real(f"real-{i}", out / f"real-{i}", info, workload, seed, vocab_size, False))
    say("simulated run")
    sim = run_sim("sim", out / "sim", config, step_profile, workload, seed, vocab_size)
    meta = {
        "spec": workload,
        "seed": seed,
        "vocab_size": vocab_size,
        "scheduler": scheduler,
        "engine": config.to_json(),
        "profile": {"name": step_profile.name, "path": profile},
        "server": info.to_json(),
        "mismatches": mismatches,
        "bounds": {"floor": floor, "k": k},
        "load_average": list(os.getloadavg()),
    }
    # A fitted API-server latency the profile does not apply (an older profile) is shown as a what-if.
    latency = None if step_profile.api_latency_s else (step_profile.fit or {}).get("request_latency_s")
    servers = [r.server_means for r in real]
    rows = compare([r.metrics for r in real], sim.metrics, bounds, servers, means(sim.records))
    result = FidelityResult(meta, real, sim, rows, latency)
    write_report(out, result)
    return FidelitySummary(out, result)


async def _server(endpoint: str) -> ServerInfo:
    async with httpclient.async_client(httpx.Timeout(30.0, connect=10.0)) as client:
        return await server_info(client, endpoint)


def _saved_server(folder: Path) -> ServerInfo:
    try:
        saved = json.loads((folder / "fidelity.json").read_text())["meta"]["server"]
        return ServerInfo(**saved, cache_labels={})
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise InputError(f"--real-from {folder}: no readable fidelity.json with the server ({exc})") from exc
