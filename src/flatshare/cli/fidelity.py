"""`flatshare calibrate-engine` and `flatshare fidelity`: the simulator against a real vLLM server
(bodies in `flatshare.fidelity.command`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from flatshare.cli.base import app, fail
from flatshare.cli.engine_options import ENGINE, BatchedOpt, MakeRoomOpt, PolicyOpt, SeedOpt, SeqsOpt
from flatshare.errors import InputError
from flatshare.fidelity.settings import PROBE_VOCAB_SIZE

EndpointOpt = Annotated[str, typer.Option(help="Base URL of a running vLLM server.")]
VocabOpt = Annotated[
    int, typer.Option(help="Prompt token ids are drawn below this (<= the model's vocabulary).")
]


def _say(message: str) -> None:
    typer.echo(message, err=True)


@app.command("calibrate-engine")
def calibrate_engine(
    endpoint: EndpointOpt,
    out: Annotated[
        Path,
        typer.Option(
            help="Profile file to write (.json), outside the package (e.g. ./my-server.json); "
            "use it with --profile PATH."
        ),
    ],
    max_num_batched_tokens: Annotated[
        int, typer.Option(help="The server's --max-num-batched-tokens (vLLM does not export it).")
    ] = ENGINE.max_num_batched_tokens,
    vocab_size: VocabOpt = PROBE_VOCAB_SIZE,
    repeats: Annotated[int, typer.Option(help="Rounds of probes; each probe's median counts.")] = 5,
    quick: Annotated[
        bool, typer.Option(help="Fewer probe shapes, 3 rounds (seconds, for a first look).")
    ] = False,
    name: Annotated[str, typer.Option(help="Profile name (default: the file name).")] = "",
    kv_bytes_per_token: Annotated[
        int, typer.Option(help="KV bytes per token (0: from the served model's config.json).")
    ] = 0,
    seed: SeedOpt = 0,
) -> None:
    """Probe a running vLLM server and fit the simulator's step-time model to it (a profile file)."""
    from flatshare.fidelity.command import calibrate_engine_command

    try:
        summary = calibrate_engine_command(
            endpoint, out, max_num_batched_tokens=max_num_batched_tokens, vocab_size=vocab_size,
            repeats=repeats, quick=quick, name=name, kv_bytes_per_token=kv_bytes_per_token, seed=seed,
            on_progress=_say,
        )  # fmt: skip
    except InputError as exc:
        fail(str(exc))
    typer.echo(summary.line())


@app.command()
def fidelity(
    profile: Annotated[str, typer.Option(help="Step-time profile: a shipped name or a JSON file.")],
    workload: Annotated[
        str, typer.Option(help="Workload spec, e.g. voice-agents:callers=4,agents=6,duration=60.")
    ],
    out: Annotated[
        Path, typer.Option(help="Output folder: real-N/, sim/, fidelity.json, report.md, cdf.png.")
    ],
    endpoint: EndpointOpt = "",
    real_from: Annotated[
        Path | None, typer.Option(help="Reuse the real runs of an earlier fidelity folder (no server).")
    ] = None,
    scheduler: Annotated[
        str, typer.Option(help="What the server runs: vllm or make-room.")
    ] = ENGINE.scheduler,
    make_room: MakeRoomOpt = ENGINE.make_room,
    policy: PolicyOpt = ENGINE.policy,
    block_size: Annotated[int, typer.Option(help="KV block size (0: the server's).")] = 0,
    kv_blocks: Annotated[int, typer.Option(help="KV blocks (0: the server's num_gpu_blocks).")] = 0,
    max_num_batched_tokens: BatchedOpt = ENGINE.max_num_batched_tokens,
    max_num_seqs: SeqsOpt = ENGINE.max_num_seqs,
    max_model_len: Annotated[int, typer.Option(help="Max model length (0: the server's).")] = 0,
    real_runs: Annotated[int, typer.Option(help="Real runs; 2 or more measure the real-vs-real noise.")] = 2,
    vocab_size: VocabOpt = PROBE_VOCAB_SIZE,
    floor: Annotated[float, typer.Option(help="Smallest error bound.")] = 0.15,
    k: Annotated[float, typer.Option(help="Bound = max(floor, k x real-vs-real error).")] = 2.0,
    seed: SeedOpt = 0,
) -> None:
    """Replay one workload against a real vLLM server and through the simulator, and compare them."""
    from flatshare.fidelity.command import fidelity_command

    try:
        summary = fidelity_command(
            endpoint, profile, workload, out, scheduler=scheduler, make_room=make_room, policy=policy,
            block_size=block_size, kv_blocks=kv_blocks, max_num_batched_tokens=max_num_batched_tokens,
            max_num_seqs=max_num_seqs, max_model_len=max_model_len, seed=seed, vocab_size=vocab_size,
            real_runs=real_runs, real_from=real_from, floor=floor, k=k, on_progress=_say,
        )  # fmt: skip
    except InputError as exc:
        fail(str(exc))
    typer.echo(summary.line())
