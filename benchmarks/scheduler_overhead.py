"""Microseconds per schedule() + update_from_output(): make-room and sage against vLLM's stock scheduler.

Every case (stock, make-room disabled, enabled, and enabled with the pin, tails and hints, with hints that
say when their turn is due (the workload then sends them too), sage disabled and enabled) runs the same
seeded workload through the
simulated engine in one process, one after another and then repeated in interleaved rounds, so machine
noise hits them alike. Only the scheduler calls are timed (not the simulator's own pricing).
Target: enabled at most 10% more than stock; disabled no measurable difference. sage
orders the queue differently, so its runs take other steps: compare per-step figures, not totals.

    python benchmarks/scheduler_overhead.py [--rounds 3] [--agents 24]
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from flatshare.sim.config import EngineConfig
from flatshare.sim.engine import SimEngine
from flatshare.sim.profile import load_profile
from flatshare.sim.requests import SimRequest
from flatshare.sim.tokens import TokenStreams

CASES: dict[str, tuple[str, dict[str, Any]]] = {
    "stock": ("vllm", {}),
    "make-room disabled": ("make-room", {"make_room": {"enabled": False}}),
    "make-room enabled": ("make-room", {"make_room": {"enabled": True, "window_tokens": 48}}),
    "sage disabled": ("sage", {"sage": {"enabled": False}}),
    "sage enabled": ("sage", {"sage": {"enabled": True}}),
    # make-room's pin, tails and hints on (the workload sends no hints and no sentence ends: their per-step checks only).
    "make-room + pin, tails, hints": (
        "make-room",
        {
            "make_room": {
                "enabled": True,
                "window_tokens": 48,
                "pin_share": 0.1,
                "pin_yields_to": "protected",
                "recompute_tail_tokens": 1024,
                "hint_window_s": 0.5,
                "sentence_end_token_ids": [31999],
            }
        },
    ),
    # Arrival hints that say when their turn is due: the workload sends one 0.3 s before each voice turn
    # (`HINTED`), each saying the turn is due in 0.3 s; the pace is read every step a hint is open.
    "make-room + hints due (sent)": (
        "make-room",
        {"make_room": {"enabled": True, "window_tokens": 48, "hint_window_s": 1.0}},
    ),
    # The ride before the turn on top: each step held for a hint alone reads the pace and picks riders.
    "make-room + hints due + ride before the turn (sent)": (
        "make-room",
        {"make_room": {"enabled": True, "window_tokens": 48, "hint_window_s": 1.0, "hint_ride_tokens": 128}},
    ),
    # Holding only while at risk: the pace is read and updated every step, each window's risk judged.
    "make-room + at risk (0.55 s)": (
        "make-room",
        {"make_room": {"enabled": True, "window_tokens": 48, "hold_deadline_s": 0.55}},
    ),
}


def workload(agents: int, seed: int) -> list[SimRequest]:
    rng = random.Random(seed)
    streams = TokenStreams(seed)
    requests = []
    for i in range(agents):
        for call in range(4):
            n = rng.randint(8000, 16000)
            requests.append(
                SimRequest(
                    f"a{i}-{call}", rng.uniform(0, 120), tuple(streams.take(f"a{i}", n)), 200, 10, "agent"
                )
            )
    for i in range(60):
        n = rng.randint(200, 800)
        requests.append(
            SimRequest(f"v{i}", rng.uniform(0, 120), tuple(streams.take(f"v{i}", n)), 40, 0, "voice")
        )
    return requests


HINTED = {"make-room + hints due (sent)", "make-room + hints due + ride before the turn (sent)"}
HINT_LEAD_S = 0.3


def with_hints(requests: list[SimRequest]) -> list[SimRequest]:
    """`requests` and, `HINT_LEAD_S` before each voice request, its arrival hint saying it is due then."""
    extra = {"flatshare_hint": "turn", "flatshare_hint_in_s": HINT_LEAD_S}
    hints = [
        SimRequest(
            f"{r.id}-hint", max(r.arrival_s - HINT_LEAD_S, 0.0), (11, 12, 13), 1, 0, "hint", extra_args=extra
        )
        for r in requests
        if r.cls == "voice"
    ]
    return [*requests, *hints]


def _timed(fn: Callable[..., Any], samples: list[float]) -> Callable[..., Any]:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter_ns()
        try:
            return fn(*args, **kwargs)
        finally:
            samples.append((time.perf_counter_ns() - start) / 1000)

    return wrapper


def measure(scheduler: str, additional: dict[str, Any], requests: list[SimRequest]) -> list[float]:
    """Per-step microseconds of schedule() + update_from_output() (paired by step)."""
    config = EngineConfig(
        scheduler=scheduler, additional_config=additional, kv_tokens=40960, max_model_len=32768
    )
    engine = SimEngine(config, load_profile())
    sched_us: list[float] = []
    update_us: list[float] = []
    engine.scheduler.schedule = _timed(engine.scheduler.schedule, sched_us)
    engine.scheduler.update_from_output = _timed(engine.scheduler.update_from_output, update_us)
    engine.run(requests)
    return [s + u for s, u in zip(sched_us, update_us, strict=False)]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--agents", type=int, default=24)
    args = parser.parse_args()
    requests = workload(args.agents, seed=0)
    results: dict[str, list[float]] = {name: [] for name in CASES}
    for _ in range(args.rounds):
        for name, (scheduler, additional) in CASES.items():
            sent = with_hints(requests) if name in HINTED else requests
            results[name].extend(measure(scheduler, additional, sent))
    stock_mean = statistics.fmean(results["stock"])
    print(f"{'case':<30}{'steps':>8}{'mean us':>10}{'p50 us':>10}{'p99 us':>10}{'vs stock':>10}")
    for name, samples in results.items():
        arr = np.asarray(samples)
        mean = float(arr.mean())
        print(
            f"{name:<30}{len(arr):>8}{mean:>10.1f}{np.percentile(arr, 50):>10.1f}"
            f"{np.percentile(arr, 99):>10.1f}{mean / stock_mean - 1:>+10.1%}"
        )


if __name__ == "__main__":
    main()
