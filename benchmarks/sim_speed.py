"""How fast the simulated engine runs: 24 agent-like streams plus 2 voice-like streams.

Agents resend a context of 10k-16k tokens that grows by a few hundred tokens per call, with pauses
between calls; voice streams send short turns with the caller speaking between them. Prints virtual
seconds per wall second, wall time per step (the scheduler's own plus the simulator's), and peak
memory. Target: at least 100x faster than real time on a 2-core machine.

    python benchmarks/sim_speed.py [--virtual-s 600] [--scheduler vllm]
"""

from __future__ import annotations

import argparse
import resource
import time

import numpy as np

from flatshare.sim.config import EngineConfig
from flatshare.sim.engine import SimEngine
from flatshare.sim.profile import load_profile
from flatshare.sim.requests import SimRequest
from flatshare.sim.tokens import TokenStreams


class Stream:
    """A closed-loop stream: the next call is sent when the previous reply ends plus a pause."""

    def __init__(self, name: str, rng: np.random.Generator, voice: bool) -> None:
        self.name, self.rng, self.voice = name, rng, voice
        self.calls = 0
        self.context = int(rng.integers(200, 400)) if voice else int(rng.integers(10000, 12000))

    def next_request(self, now: float, streams: TokenStreams) -> SimRequest:
        pause = self.rng.lognormal(np.log(3.0), 0.5) if self.voice else self.rng.lognormal(np.log(4.0), 1.0)
        self.calls += 1
        self.context = min(self.context + int(self.rng.integers(30, 80 if self.voice else 600)), 16000)
        out = int(self.rng.integers(15, 60)) if self.voice else int(self.rng.integers(50, 400))
        ids = tuple(streams.take(self.name, self.context))
        cls, priority = ("voice", 0) if self.voice else ("agent", 10)
        return SimRequest(f"{self.name}-{self.calls}", now + pause, ids, out, priority, cls)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--virtual-s", type=float, default=600.0)
    parser.add_argument("--scheduler", default="vllm")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    rng = np.random.default_rng(args.seed)
    streams = TokenStreams(args.seed)
    config = EngineConfig(scheduler=args.scheduler, max_model_len=32768)
    engine = SimEngine(config, load_profile())
    owners: dict[str, Stream] = {}
    for i in range(26):
        stream = Stream(f"agent{i}" if i < 24 else f"voice{i - 24}", rng, voice=i >= 24)
        request = stream.next_request(float(rng.uniform(0, 30)), streams)
        owners[request.id] = stream
        engine.submit(request)

    started = time.perf_counter()
    while engine.now < args.virtual_s:
        report = engine.step()
        if report is None:
            break
        for request_id in report.finished:
            stream = owners.pop(request_id)
            follow = stream.next_request(report.end_s, streams)
            owners[follow.id] = stream
            engine.submit(follow)
    wall = time.perf_counter() - started
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    finished = sum(r.status == "finished" for r in engine.records.values())
    print(f"scheduler            {args.scheduler}")
    print(f"virtual seconds      {engine.now:.1f}")
    print(f"wall seconds         {wall:.2f}")
    print(f"virtual s / wall s   {engine.now / wall:.0f}x real time (target >= 100x)")
    print(f"steps                {engine.steps}")
    print(f"wall ms per step     {1000 * wall / max(engine.steps, 1):.3f}")
    print(f"requests finished    {finished}")
    print(f"preemptions          {engine.preemptions}")
    print(f"peak RSS MiB         {peak_mib:.0f} (includes vLLM and torch)")


if __name__ == "__main__":
    main()
