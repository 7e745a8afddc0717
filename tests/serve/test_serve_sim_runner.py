"""The wall-clock runner on its own: pacing and speed, aborts before admission, engine failure."""

from __future__ import annotations

import asyncio
import time

import pytest

from flatshare.serve.abort import ABORTED
from flatshare.serve.runner import RequestHandle, TokenDelta, WallClockRunner
from flatshare.sim.config import EngineConfig
from flatshare.sim.engine import SimEngine, StepReport
from flatshare.sim.profile import load_profile

pytestmark = pytest.mark.vllm

PROFILE = load_profile()


def _engine() -> SimEngine:
    return SimEngine(EngineConfig(kv_tokens=4096, max_model_len=2048), PROFILE)


async def _collect(handle: RequestHandle) -> list[tuple[float, TokenDelta]]:
    return [(time.perf_counter(), delta) async for delta in handle.deltas()]


@pytest.mark.parametrize("speed", [1.0, 10.0])
def test_tokens_arrive_when_the_virtual_clock_says(speed: float) -> None:
    n = 30

    async def go() -> tuple[float, list[tuple[float, TokenDelta]], float]:
        engine = _engine()
        runner = WallClockRunner(engine, speed)
        await runner.start()
        start = time.perf_counter()
        deltas = await _collect(runner.submit(list(range(10, 74)), n))
        await runner.stop()
        return start, deltas, engine.now

    start, deltas, virtual_end = asyncio.run(go())
    assert sum(d.count for _, d in deltas) == n
    assert [d.start for _, d in deltas] == list(range(n))
    assert deltas[-1][1].finish_reason == "length"
    elapsed = deltas[-1][0] - start
    assert virtual_end >= n * PROFILE.step_fixed_s
    # Never early; late only by scheduling noise of a shared machine.
    assert virtual_end / speed * 0.9 <= elapsed <= virtual_end / speed + 1.0


def test_abort_before_admission_still_frees_the_request() -> None:
    async def go() -> SimEngine:
        engine = _engine()
        runner = WallClockRunner(engine)
        await runner.start()
        doomed = runner.submit(list(range(10, 500)), 200)
        runner.abort(doomed)  # not yet admitted: the engine holds it in its arrival queue
        other = runner.submit(list(range(600, 610)), 3)
        deltas = await _collect(other)
        assert deltas[-1][1].finish_reason == "length"
        await runner.stop()
        assert doomed.done and doomed.produced == 0
        return engine

    engine = asyncio.run(go())
    assert engine.records[next(iter(engine.records))].status == ABORTED
    assert engine.scheduler.get_request_counts() == (0, 0)
    assert engine.scheduler.get_kv_cache_usage() == 0


def test_engine_failure_ends_open_requests_with_an_error() -> None:
    async def go() -> tuple[list[tuple[float, TokenDelta]], WallClockRunner]:
        engine = _engine()

        def broken() -> StepReport | None:
            raise RuntimeError("scheduler exploded")

        engine.step = broken  # type: ignore[method-assign]
        runner = WallClockRunner(engine)
        await runner.start()
        deltas = await asyncio.wait_for(_collect(runner.submit([5, 6, 7], 4)), timeout=5)
        with pytest.raises(RuntimeError, match="has failed"):
            runner.submit([5], 1)
        await runner.stop()
        return deltas, runner

    deltas, runner = asyncio.run(go())
    assert deltas[-1][1].error is not None and "scheduler exploded" in deltas[-1][1].error
    assert runner.failure is not None


def test_speed_must_be_positive() -> None:
    with pytest.raises(ValueError, match="speed"):
        WallClockRunner(_engine(), speed=0)
