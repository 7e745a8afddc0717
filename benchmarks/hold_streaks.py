"""How long make-room's hold lasts in the co-location experiment: the figure behind `max_hold_steps`.

Runs the experiment's make-room conditions (T=48, with and without the decode hold) on the simulated
engine with the hold unbounded, and prints the distribution of hold streaks (steps in a row that held
lower-priority work) and the voice turns' p95 time to the first sentence (engine part); then the same runs with the default bound, side by
side, so the bound's cost to the protected tail is read off one table.

    .venv/bin/python benchmarks/hold_streaks.py [--callers 2,6] [--seeds 1] [--duration 300]
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import numpy as np

from flatshare.replay.virtual import run_virtual
from flatshare.scheduler.config import MakeRoomConfig
from flatshare.sim.config import EngineConfig
from flatshare.sim.engine import SimEngine
from flatshare.sim.profile import load_profile
from flatshare.sim.requests import SimRequest
from flatshare.sim.tokens import TokenStreams
from flatshare.workloads.spec import parse_spec

UNBOUNDED = 10**9


def streaks(trace: Path) -> list[int]:
    """Lengths of the runs of consecutive steps that held something, from make-room's trace."""
    steps = [
        record["step"]
        for record in map(json.loads, trace.read_text().splitlines())
        if record.get("held_running") or record.get("held_waiting")
    ]
    runs: list[int] = []
    for i, step in enumerate(steps):
        if i and step == steps[i - 1] + 1:
            runs[-1] += 1
        else:
            runs.append(1)
    return runs


def one(
    callers: int, seed: int, duration: float, settings: dict[str, object], tmp: Path
) -> tuple[list[int], float, int]:
    trace = tmp / f"trace-{callers}-{seed}-{len(list(tmp.iterdir()))}.jsonl"
    make_room = {"enabled": True, **settings, "trace_path": str(trace)}
    config = EngineConfig(
        scheduler="make-room", additional_config={"make_room": make_room}, max_model_len=16384
    )
    spec = f"voice-agents:callers={callers},agents=24,duration={duration}"
    workload = parse_spec(spec, seed=seed, max_model_len=config.max_model_len)
    engine = SimEngine(config, load_profile())
    run = run_virtual(workload, [engine], until_s=duration, stop_s=duration + 60.0)
    ttfts = [r.first_sentence_s - r.send_s for r in run.records if r.cls == "voice" and r.first_sentence_s]
    releases = engine.result().scheduler_counters["hold_bound_releases"]
    return streaks(trace) if trace.exists() else [], float(np.percentile(ttfts, 95)), int(releases)


def back_to_back(bound: int) -> tuple[float, float | None, int]:
    """Protected p95 TTFT, the low-priority request's first token (None: starved), bound releases."""
    streams = TokenStreams(7)
    requests = [SimRequest("low", 0.0, tuple(streams.take("low", 16000)), 64, 10, "agent")]
    for i in range(150):
        ids = tuple(streams.take(f"v{i}", 400))
        requests.append(SimRequest(f"v{i}", 0.05 + 0.4 * i, ids, 48, 0, "voice"))
    make_room = {"enabled": True, "window_tokens": 48, "max_hold_steps": bound}
    config = EngineConfig(scheduler="make-room", additional_config={"make_room": make_room})
    engine = SimEngine(config, load_profile())
    result = engine.run(requests)
    voice = [r.ttft_s for r in result.records if r.cls == "voice" and r.ttft_s is not None]
    low = engine.records["low"]
    low_first = low.token_times_s[0] if low.token_times_s else None
    return float(np.percentile(voice, 95)), low_first, int(result.scheduler_counters["hold_bound_releases"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--callers", default="2,6")
    parser.add_argument("--seeds", type=int, default=1)
    parser.add_argument("--duration", type=float, default=300.0)
    args = parser.parse_args()
    default = MakeRoomConfig().max_hold_steps
    print(
        f"{'callers':>7} {'hold':>12} {'bound':>10} {'streaks':>8} {'p50':>5} {'p99':>5} {'max':>5} {'releases':>8} {'voice 1st sentence p95':>22}"
    )
    with tempfile.TemporaryDirectory() as tmp:
        for callers in (int(c) for c in args.callers.split(",")):
            for hold_decode in (False, True):
                for bound in (UNBOUNDED, default):
                    settings: dict[str, object] = {
                        "window_tokens": 48,
                        "hold_decode": hold_decode,
                        "max_hold_steps": bound,
                    }
                    runs: list[int] = []
                    p95: list[float] = []
                    releases = 0
                    for seed in range(args.seeds):
                        s, p, r = one(callers, seed, args.duration, settings, Path(tmp))
                        runs += s
                        p95.append(p)
                        releases += r
                    label = "prefill+decode" if hold_decode else "prefill"
                    shown = "none" if bound == UNBOUNDED else str(bound)
                    q = np.percentile(runs, [50, 99]) if runs else [0, 0]
                    print(
                        f"{callers:>7} {label:>12} {shown:>10} {len(runs):>8} {q[0]:>5.0f} {q[1]:>5.0f} "
                        f"{max(runs, default=0):>5} {releases:>8} {np.mean(p95):>21.3f}s"
                    )
    print("\nback to back: a protected request every 0.4 s beside a 16k-token priority-10 prompt")
    print(f"{'bound':>10} {'voice TTFT p95':>15} {'low first token':>16} {'releases':>8}")
    for bound in (UNBOUNDED, default):
        p95_s, low_first, releases = back_to_back(bound)
        shown = "none" if bound == UNBOUNDED else str(bound)
        first = "never" if low_first is None else f"{low_first:.2f} s"
        print(f"{shown:>10} {p95_s:>14.3f}s {first:>16} {releases:>8}")


if __name__ == "__main__":
    main()
