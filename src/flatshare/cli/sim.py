"""Commands that run the simulated engine: `sim`, `serve-sim`, `demo`."""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from flatshare.cli.base import app, fail
from flatshare.cli.engine_options import (
    BatchedOpt,
    BlockOpt,
    KvTokensOpt,
    MakeRoomOpt,
    ModelLenOpt,
    PolicyOpt,
    ProfileOpt,
    SchedulerOpt,
    SeedOpt,
    SeqsOpt,
    TierOpt,
    engine_from_options,
)
from flatshare.errors import InputError

if TYPE_CHECKING:
    from flatshare.sim.config import EngineConfig
    from flatshare.sim.profile import StepTimeProfile
    from flatshare.sim.requests import SimRequest


@app.command()
def sim(
    requests: Annotated[Path, typer.Option(help="Request file, JSONL (see docs/formats.md).")],
    out: Annotated[Path, typer.Option(help="Output folder: requests.jsonl, samples.jsonl, summary.json.")],
    scheduler: SchedulerOpt = "vllm",
    policy: PolicyOpt = "priority",
    profile: ProfileOpt = "",
    kv_tokens: KvTokensOpt = 0,
    max_num_batched_tokens: BatchedOpt = 512,
    max_num_seqs: SeqsOpt = 256,
    max_model_len: ModelLenOpt = 0,
    block_size: BlockOpt = 16,
    cpu_tier_tokens: TierOpt = 0,
    make_room: MakeRoomOpt = "",
    seed: SeedOpt = 0,
) -> None:
    """Run requests through vLLM's scheduler on a virtual clock and write per-request records."""
    from flatshare.sim.requests import load_requests

    try:
        config, step_profile = engine_from_options(
            profile, scheduler, policy, kv_tokens, max_num_batched_tokens, max_num_seqs,
            max_model_len, block_size, cpu_tier_tokens, make_room,
        )  # fmt: skip
        specs = load_requests(requests, config.max_model_len, seed)
        _run_sim(config, step_profile, specs, out, seed)
    except InputError as exc:
        fail(str(exc))


def _run_sim(
    config: EngineConfig, step_profile: StepTimeProfile, specs: list[SimRequest], out: Path, seed: int
) -> None:
    from flatshare.sim.engine import SimEngine
    from flatshare.sim.output import write_result

    started = time.perf_counter()
    result = SimEngine(config, step_profile).run(specs)
    wall = time.perf_counter() - started
    meta = {"engine": config.to_json(), "profile": step_profile.name, "seed": seed}
    summary = write_result(out, result, meta)
    typer.echo(
        f"simulated {summary['requests']} requests, {result.steps} steps, {result.virtual_s:.1f} virtual s "
        f"in {wall:.1f} wall s; {result.preemptions} preemptions; wrote {out}/"
    )


@app.command("serve-sim")
def serve_sim(
    port: Annotated[int, typer.Option(help="Port to listen on.")] = 8000,
    host: Annotated[str, typer.Option(help="Address to bind (loopback by default).")] = "127.0.0.1",
    model_name: Annotated[str, typer.Option(help="Model name served on /v1/models.")] = "sim",
    speed: Annotated[float, typer.Option(help="Virtual seconds per wall second (>= 1).")] = 1.0,
    scheduler: SchedulerOpt = "vllm",
    policy: PolicyOpt = "priority",
    profile: ProfileOpt = "",
    kv_tokens: KvTokensOpt = 0,
    max_num_batched_tokens: BatchedOpt = 512,
    max_num_seqs: SeqsOpt = 256,
    max_model_len: ModelLenOpt = 0,
    block_size: BlockOpt = 16,
    cpu_tier_tokens: TierOpt = 0,
    make_room: MakeRoomOpt = "",
    seed: SeedOpt = 0,
) -> None:
    """The simulated engine behind a real OpenAI-compatible server (wall-clock time, vLLM's /metrics)."""
    try:
        config, step_profile = engine_from_options(
            profile, scheduler, policy, kv_tokens, max_num_batched_tokens, max_num_seqs,
            max_model_len, block_size, cpu_tier_tokens, make_room,
        )  # fmt: skip
        if speed < 1:
            raise InputError("--speed must be >= 1")
    except InputError as exc:
        fail(str(exc))
    from flatshare.serve.server import serve_sim_main

    serve_sim_main(port, host, config, step_profile, seed, model_name=model_name, speed=speed)


@app.command()
def demo(
    out: Annotated[Path, typer.Option(help="Output folder for each case's records.")] = Path("out/demo"),
    profile: Annotated[str, typer.Option(help="Step-time profile: a shipped name or a JSON file.")] = "",
) -> None:
    """The main job on the simulated engine: a voice turn beside two agents that fill the KV cache."""
    from rich.console import Console
    from rich.table import Table

    from flatshare.demo import DemoCase, run_case
    from flatshare.sim.profile import DEFAULT_PROFILE, load_profile

    step_profile = load_profile(profile or DEFAULT_PROFILE)
    make_room: dict[str, object] = {"make_room": {"enabled": True, "window_tokens": 48}}
    cases = [
        DemoCase("roomy-cache-vllm", 40960, "vllm", {}),
        DemoCase("full-cache-vllm", 32400, "vllm", {}),
        DemoCase("full-cache-make-room", 32400, "make-room", make_room),
    ]
    table = Table(title=f"voice turn beside two 16k-token agents (simulated, profile {step_profile.name})")
    table.add_column("case", no_wrap=True)
    for column in ("KV use at arrival", "voice TTFT s", "voice reply done s", "preemptions"):
        table.add_column(column)
    for case in cases:
        row = run_case(case, step_profile, out)
        table.add_row(
            row.key,
            f"{row.kv_at_arrival:.0%}",
            f"{row.voice_ttft_s:.2f}",
            f"{row.voice_finish_s:.2f}",
            str(row.preemptions),
        )
    Console().print(table)
    typer.echo(f"records, samples and summaries: {out}/<case>/")
