"""`flatshare sim` and `flatshare serve-sim`: the command bodies, with plain arguments.

The CLI (`flatshare.cli.sim`) maps its options onto these functions and turns `InputError` into a
one-line error (exit 2). vLLM is imported only when an engine is built.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from flatshare import enginelog
from flatshare.errors import InputError
from flatshare.sim.options import EngineOptions


@dataclass(frozen=True)
class SimSummary:
    """What `sim_command` did."""

    out: Path
    requests: int
    steps: int
    virtual_s: float
    wall_s: float
    preemptions: int

    def line(self) -> str:
        return (
            f"simulated {self.requests} requests, {self.steps} steps, {self.virtual_s:.1f} virtual s "
            f"in {self.wall_s:.1f} wall s; {self.preemptions} preemptions; wrote {self.out}/"
        )


def sim_command(requests: Path, out: Path, engine: EngineOptions | None = None, seed: int = 0) -> SimSummary:
    """Run the request file `requests` through vLLM's scheduler on a virtual clock and write
    `out`/requests.jsonl, samples.jsonl, summary.json (and engine.log). InputError on bad input,
    before anything is written."""
    from flatshare.replay.rundir import check_out
    from flatshare.sim.requests import load_requests

    config, step_profile = (engine or EngineOptions()).build()
    specs = load_requests(requests, config.max_model_len, seed)
    check_out(out)
    from flatshare.sim.engine import SimEngine
    from flatshare.sim.output import write_result

    started = time.perf_counter()
    result = SimEngine(config, step_profile).run(specs)
    wall = time.perf_counter() - started
    meta = {"engine": config.to_json(), "profile": step_profile.name, "seed": seed}
    summary = write_result(out, result, meta)
    enginelog.log_to(out)
    return SimSummary(out, summary["requests"], result.steps, result.virtual_s, wall, result.preemptions)


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
