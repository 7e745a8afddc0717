"""The `flatshare` command line. Sub-commands import what they need when they run, so `--help`
and the commands that do not need vLLM never import it (importing vLLM takes ~9 s)."""

from __future__ import annotations

import dataclasses
import json
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, NoReturn

import typer

from flatshare.errors import InputError

if TYPE_CHECKING:
    from flatshare.sim.config import EngineConfig
    from flatshare.sim.profile import StepTimeProfile
    from flatshare.sim.requests import SimRequest

app = typer.Typer(
    name="flatshare",
    help=(
        "Share vLLM GPUs between latency-critical requests (voice turns, short chats) and heavy agent "
        "traffic: a scheduler plug-in (make-room), a simulated engine built on vLLM's own scheduler, and "
        "honest measurement."
    ),
    no_args_is_help=True,
    add_completion=False,
)


@app.callback()
def _root() -> None:
    """Share vLLM GPUs between latency-critical requests and heavy agent traffic."""


def _fail(message: str) -> NoReturn:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code=2)


SchedulerOpt = Annotated[str, typer.Option(help="vllm, make-room, or a dotted Scheduler subclass.")]
PolicyOpt = Annotated[str, typer.Option(help="vLLM scheduling policy: fcfs or priority.")]
ProfileOpt = Annotated[str, typer.Option(help="Step-time profile: a shipped name or a JSON file.")]
KvTokensOpt = Annotated[int, typer.Option(help="KV capacity in tokens (0: the profile's).")]
BatchedOpt = Annotated[int, typer.Option(help="vLLM's token budget per step.")]
SeqsOpt = Annotated[int, typer.Option(help="vLLM's max running requests.")]
ModelLenOpt = Annotated[int, typer.Option(help="vLLM's max model length (0: min(32768, KV)).")]
BlockOpt = Annotated[int, typer.Option(help="KV block size in tokens.")]
TierOpt = Annotated[int, typer.Option(help="Simulated CPU KV tier capacity in tokens (0: off).")]
MakeRoomOpt = Annotated[str, typer.Option(help="make-room settings as JSON, e.g. '{\"enabled\": true}'.")]
SeedOpt = Annotated[int, typer.Option(help="Seed for generated prompt token ids.")]


def _engine(
    profile: str,
    scheduler: str,
    policy: str,
    kv_tokens: int,
    max_num_batched_tokens: int,
    max_num_seqs: int,
    max_model_len: int,
    block_size: int,
    cpu_tier_tokens: int,
    make_room: str,
) -> tuple[EngineConfig, StepTimeProfile]:
    """The engine settings and profile that `sim` and `serve-sim` share (raises InputError)."""
    from flatshare.sim.config import EngineConfig
    from flatshare.sim.profile import DEFAULT_PROFILE, load_profile

    step_profile = load_profile(profile or DEFAULT_PROFILE)
    kv = kv_tokens or step_profile.default_kv_tokens
    config = EngineConfig(
        block_size=block_size,
        kv_tokens=kv,
        max_num_batched_tokens=max_num_batched_tokens,
        max_num_seqs=max_num_seqs,
        policy=policy,
        max_model_len=max_model_len or min(32768, kv),
        scheduler=scheduler,
        additional_config={"make_room": _parse_json(make_room, "--make-room")} if make_room else {},
        cpu_tier_tokens=cpu_tier_tokens,
    )
    return config, step_profile


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
        config, step_profile = _engine(
            profile, scheduler, policy, kv_tokens, max_num_batched_tokens, max_num_seqs,
            max_model_len, block_size, cpu_tier_tokens, make_room,
        )  # fmt: skip
        specs = load_requests(requests, config.max_model_len, seed)
        _run_sim(config, step_profile, specs, out, seed)
    except InputError as exc:
        _fail(str(exc))


def _parse_json(text: str, option: str) -> dict[str, object]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(f"{option}: not valid JSON ({exc.msg})") from exc
    if not isinstance(value, dict):
        raise InputError(f"{option}: must be a JSON object")
    return value


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
        config, step_profile = _engine(
            profile, scheduler, policy, kv_tokens, max_num_batched_tokens, max_num_seqs,
            max_model_len, block_size, cpu_tier_tokens, make_room,
        )  # fmt: skip
        if speed < 1:
            raise InputError("--speed must be >= 1")
    except InputError as exc:
        _fail(str(exc))
    from flatshare.serve.server import serve_sim_main

    serve_sim_main(port, host, config, step_profile, seed, model_name=model_name, speed=speed)


experiment_app = typer.Typer(
    help="Experiments on the simulated engine (or real endpoints).", no_args_is_help=True
)
app.add_typer(experiment_app, name="experiment")


@experiment_app.command("colocation")
def experiment_colocation(
    out: Annotated[Path, typer.Option(help="Experiment folder: runs/, summary.json, report.md, figures.")],
    quick: Annotated[bool, typer.Option(help="2 callers, 2 seeds, 300 virtual s (a few minutes).")] = False,
    callers: Annotated[str, typer.Option(help="Caller counts, comma-separated.")] = "2,4,6",
    agents: Annotated[int, typer.Option(help="Coding-agent sessions beside the voice agent.")] = 24,
    seeds: Annotated[int, typer.Option(help="Seeds per condition (at least 5 for the full run).")] = 5,
    duration: Annotated[float, typer.Option(help="Virtual seconds per run.")] = 600.0,
    max_model_len: Annotated[
        int, typer.Option(help="Engine max model length; agent contexts end there.")
    ] = 16384,
    workers: Annotated[int, typer.Option(help="Processes running in parallel (0: one per core, max 2).")] = 0,
) -> None:
    """A voice agent beside coding agents under vLLM's stock scheduler and make-room variants."""
    from rich.progress import Progress

    from flatshare.analysis.report import build_report
    from flatshare.experiments.colocation import QUICK, ColocationPlan, run_plan

    try:
        if quick:
            plan = QUICK
        else:
            counts = tuple(int(c) for c in callers.split(","))
            plan = ColocationPlan(
                callers=counts, agents=agents, seeds=seeds, duration_s=duration, max_model_len=max_model_len
            )
        if workers:
            plan = dataclasses.replace(plan, workers=workers)
    except ValueError as exc:
        _fail(f"experiment colocation: {exc}")
    total = len(list(plan.jobs()))
    with Progress() as progress:
        task = progress.add_task("co-location runs", total=total)
        run_plan(out, plan, on_done=lambda _: progress.advance(task))
    build_report(out)
    typer.echo(f"report: {out / 'report.md'}  summary: {out / 'summary.json'}")


@app.command()
def report(
    out: Annotated[Path, typer.Argument(help="An experiment folder with runs/ inside.")],
) -> None:
    """Rebuild summary.json, report.md and the figures of an experiment from its saved runs."""
    from flatshare.analysis.report import build_report

    if not (out / "runs").is_dir():
        _fail(f"{out}: no runs/ folder (not an experiment output)")
    build_report(out)
    typer.echo(f"report: {out / 'report.md'}")


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


def main() -> None:
    try:
        app()
    except InputError as exc:  # pragma: no cover - commands catch their own
        typer.echo(f"error: {exc}", err=True)
        sys.exit(2)


if __name__ == "__main__":
    main()
