"""The step ledger: a run's busy time in the step model's parts, over a window, and how a step counts."""

from __future__ import annotations

import pytest

from flatshare.sim.config import EngineConfig, fitting_model_len
from flatshare.sim.engine import SimEngine, StepReport
from flatshare.sim.profile import ScheduledWork, load_profile
from flatshare.sim.step_ledger import StepLedger, floor_step_s, summed, work_key
from simkit import req


def _engine(profile: str, **config: object) -> SimEngine:
    kv = int(config.pop("kv_tokens", 8000))  # type: ignore[call-overload]
    cfg = EngineConfig(kv_tokens=kv, max_model_len=fitting_model_len(kv, 16), **config)  # type: ignore[arg-type]
    return SimEngine(cfg, load_profile(profile))


@pytest.mark.vllm
@pytest.mark.parametrize("profile", ["llama3-8b-24gb", "llama3-8b-24gb-roofline"])
@pytest.mark.parametrize("async_scheduling", [False, True])
def test_the_ledger_adds_up_to_the_steps_that_started_in_its_window(
    profile: str, async_scheduling: bool
) -> None:
    engine = _engine(profile, async_scheduling=async_scheduling)
    steps: list[StepReport] = []
    engine.on_step = steps.append
    engine.ledger.until_s = 2.0
    requests = [req(f"r{i}", 0.2 * i, 1200 + 300 * i, 30, priority=i % 2) for i in range(8)]
    engine.run(requests)
    counted = [s for s in steps if s.start_s < 2.0]
    assert 0 < len(counted) < len(steps), "the window must cut the run"
    ledger = engine.ledger
    assert ledger.steps == len(counted)
    assert ledger.busy_s == pytest.approx(sum(s.end_s - s.start_s for s in counted), rel=1e-9)
    assert ledger.floor_s == pytest.approx(len(counted) * floor_step_s(engine.profile))
    decode_only = [s for s in counted if all(n == 1 for n in s.scheduled.values())]
    assert ledger.decode_only_steps == len(decode_only) > 0
    assert ledger.fixed_s == pytest.approx(len(counted) * engine.profile.step_fixed_s)
    by_priority = ledger.to_json()
    work = by_priority[work_key(0)] + by_priority[work_key(1)]
    assert work == pytest.approx(ledger.busy_s - ledger.fixed_s - ledger.sync_load_s, rel=1e-6)
    assert by_priority["window_s"] == 2.0


PROFILE = load_profile("llama3-8b-24gb")


def test_a_step_after_the_window_is_not_counted_and_a_prefill_step_is_not_decode_only() -> None:
    ledger = StepLedger(PROFILE, until_s=1.0)
    mixed = [ScheduledWork(64, 0, False), ScheduledWork(1, 100, True)]
    ledger.add(0.5, mixed, [10, 0], sync_load_s=0.004)
    ledger.add(1.0, [ScheduledWork(1, 100, True)], [0], sync_load_s=0.0)
    assert (ledger.steps, ledger.decode_only_steps) == (1, 0)
    assert ledger.busy_s == pytest.approx(PROFILE.step_time(mixed) + 0.004)
    ledger.until_s = None
    ledger.add(1.5, [ScheduledWork(1, 100, True)], [0], sync_load_s=0.0)
    assert ledger.decode_only_steps == 1
    assert ledger.decode_only_s == pytest.approx(PROFILE.step_time([ScheduledWork(1, 100, True)]))


def test_the_work_is_split_by_priority_attention_as_priced_and_linear_work_by_tokens() -> None:
    ledger = StepLedger(PROFILE)
    chunk, decode = ScheduledWork(63, 1000, False), ScheduledWork(1, 5000, True)
    ledger.add(0.0, [chunk, decode], [10, 0], sync_load_s=0.0)
    parts = PROFILE.step_parts([chunk, decode])
    table = ledger.to_json()
    assert table[work_key(10)] == pytest.approx(
        PROFILE.step_parts([chunk]).attention_s + parts.linear_s * 63 / 64, abs=1e-6
    )
    assert table[work_key(0)] == pytest.approx(
        PROFILE.step_parts([decode]).attention_s + parts.linear_s / 64, abs=1e-6
    )
    with pytest.raises(ValueError, match="one priority"):
        ledger.add(0.0, [chunk], [], sync_load_s=0.0)


def test_engines_ledgers_sum_field_by_field_but_share_the_window() -> None:
    a, b = StepLedger(PROFILE, until_s=60.0), StepLedger(PROFILE, until_s=60.0)
    a.add(0.0, [ScheduledWork(1, 10, True)], [0], 0.0)
    b.add(0.0, [ScheduledWork(8, 0, False)], [10], 0.0)
    total = summed([a.to_json(), b.to_json()])
    assert total["steps"] == 2 and total["decode_only_steps"] == 1 and total["window_s"] == 60.0
    assert total["busy_s"] == pytest.approx(a.busy_s + b.busy_s, abs=1e-6)
    assert summed([]) == {}
