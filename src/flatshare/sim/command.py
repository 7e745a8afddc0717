"""`flatshare sim`: the command body, with plain arguments (`flatshare serve-sim`'s: `flatshare.serve.command`).

The CLI (`flatshare.cli.sim`) maps its options onto this function and turns `InputError` into a
one-line error (exit 2). vLLM is imported only when an engine is built.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from flatshare import enginelog
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
    from flatshare.runfiles.files import check_out
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
