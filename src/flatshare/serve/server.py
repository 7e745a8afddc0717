"""Building the simulated server and running it under uvicorn: `serve_sim_main` is what the CLI calls."""

from __future__ import annotations

import socket

import uvicorn
from starlette.applications import Starlette

from flatshare.serve.app import ServeState, build_app
from flatshare.serve.protocol import ServedModel
from flatshare.serve.runner import WallClockRunner
from flatshare.serve.telemetry import ServeMetrics
from flatshare.serve.tokenizer import SimTokenizer
from flatshare.serving import access_log_option, filter_access_log
from flatshare.sim.config import EngineConfig
from flatshare.sim.engine import SimEngine
from flatshare.sim.profile import StepTimeProfile

DEFAULT_MODEL_NAME = "sim"
GRACEFUL_SHUTDOWN_S = 2


def build_sim_app(
    config: EngineConfig,
    profile: StepTimeProfile,
    seed: int = 0,
    model_name: str = DEFAULT_MODEL_NAME,
    speed: float = 1.0,
) -> Starlette:
    """A fresh engine (vLLM's scheduler per `config`, priced by `profile`) behind the OpenAI routes.

    `seed` salts the tokenizer's hash and the output words; `speed` > 1 runs the virtual clock faster
    than the wall clock (virtual seconds = wall seconds x speed).
    """
    if not model_name:
        raise ValueError("model_name must not be empty")
    engine = SimEngine(config, profile)
    metrics = ServeMetrics(model_name, engine, speed)
    runner = WallClockRunner(engine, speed, listener=metrics)
    served = ServedModel(model_name, config.max_model_len, priority_enabled=config.policy == "priority")
    return build_app(ServeState(runner, metrics, SimTokenizer(seed), served))


def serve_sim_main(
    sock: socket.socket,
    url: str,
    config: EngineConfig,
    profile: StepTimeProfile,
    seed: int,
    *,
    model_name: str = DEFAULT_MODEL_NAME,
    speed: float = 1.0,
    log_level: str = "info",
    access_log: str = "requests",
) -> None:
    """Serve the simulated engine on `sock` (bound to `url`, `flatshare.serving.listen`) until
    interrupted (Ctrl-C / SIGTERM). `access_log`: `flatshare.serving`'s modes (default: every request
    but the poll routes)."""
    app = build_sim_app(config, profile, seed, model_name, speed)
    print(
        f"serve-sim: model {model_name!r} on {url} (scheduler {config.scheduler}, "
        f"policy {config.policy}, kv_tokens {config.kv_tokens}, profile {profile.name}, speed {speed}x)",
        flush=True,
    )
    settings = uvicorn.Config(
        app,
        log_level=log_level,
        timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S,
        **access_log_option(access_log),
    )
    filter_access_log(access_log)
    try:
        uvicorn.Server(settings).run(sockets=[sock])
    finally:
        sock.close()
