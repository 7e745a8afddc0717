"""`flatshare serve-sim`: the command body, with plain arguments.

The CLI (`flatshare.cli.sim`) maps its options onto this function and turns `InputError` into a
one-line error (exit 2). vLLM is imported only once the settings are checked and the port is open.
"""

from __future__ import annotations

from flatshare.errors import InputError
from flatshare.sim.options import EngineOptions


def serve_sim_command(
    port: int,
    host: str,
    model_name: str,
    speed: float,
    engine: EngineOptions | None = None,
    seed: int = 0,
    access_log: str = "requests",
) -> None:
    """Serve the simulated engine until interrupted. InputError on bad settings or a port it cannot
    listen on, before vLLM is imported."""
    from flatshare.serving import check_access_log, listen

    config, step_profile = (engine or EngineOptions()).build()
    if speed < 1:
        raise InputError("--speed must be >= 1")
    check_access_log(access_log)
    sock = listen(host, port)
    try:
        from flatshare.serve.server import serve_sim_main
    except BaseException:
        sock.close()
        raise
    url = f"http://{host}:{port}"
    serve_sim_main(
        sock, url, config, step_profile, seed, model_name=model_name, speed=speed, access_log=access_log
    )
