"""make-room's arrival hints (`hint_window_s`) and small protected tails recomputed
(`recompute_tail_tokens`), on vLLM's real scheduler in the simulated engine."""

from __future__ import annotations

import pytest

from flatshare.scheduler import MakeRoomConfig, MakeRoomConfigError
from flatshare.scheduler.hint import HintWindows, hint_due_in_s, is_turn_hint
from flatshare.sim.config import EngineConfig, fitting_model_len
from flatshare.sim.engine import SimEngine, SimResult
from flatshare.sim.profile import load_profile
from flatshare.sim.requests import SimRequest
from simkit import by_id, req

pytestmark = pytest.mark.vllm

HINT = {"flatshare_hint": "turn"}


def hint(rid: str, at: float) -> SimRequest:
    return SimRequest(rid, at, (11, 12, 13), 1, 0, "hint", extra_args=HINT)


def simulate(requests: list[SimRequest], kv: int = 32768, **make_room: object) -> tuple[SimResult, SimEngine]:
    config = EngineConfig(kv_tokens=kv, max_model_len=fitting_model_len(kv, 16), max_num_batched_tokens=512)
    config = config.with_changes(
        scheduler="make-room", additional_config={"make_room": {"enabled": True, **make_room}}
    )
    engine = SimEngine(config, load_profile())
    return engine.run(requests), engine


def test_hint_windows_match_arrivals_oldest_first_and_expire() -> None:
    windows = HintWindows(0.5)
    assert windows.threshold() is None and not windows.arrived()
    windows.open(0, now=1.0)
    windows.open(-1, now=1.2)
    assert windows.threshold() == -1
    assert windows.arrived() and windows.threshold() == -1  # the oldest (priority 0) was fulfilled
    assert windows.expire(1.69) == 0 and windows.expire(1.7) == 1 and len(windows) == 0
    assert is_turn_hint(HINT) and not is_turn_hint({"flatshare_hint": "maybe"}) and not is_turn_hint(None)


def test_a_hint_that_says_when_holds_only_once_its_turn_is_due_within_the_lead() -> None:
    windows = HintWindows(0.6)
    windows.open(0, now=1.0, due_in_s=0.4)  # the turn is expected at 1.4
    assert windows.threshold() == 0  # without a lead every open hint holds
    assert windows.threshold(1.1, lead_s=0.2) is None and windows.waiting(1.1, 0.2) == 1
    assert windows.threshold(1.2, lead_s=0.2) == 0 and windows.waiting(1.2, 0.2) == 0
    assert windows.threshold(1.0, lead_s=None) == 0 and windows.waiting(1.0, None) == 0  # unmeasured: hold
    assert windows.due_in_s(1.1, lead_s=0.2) is None  # not holding yet
    assert windows.due_in_s(1.25, lead_s=0.2) == pytest.approx(0.15)
    assert windows.due_in_s(1.5, lead_s=None) == pytest.approx(-0.1)  # overdue
    assert windows.expire(1.6) == 1  # the window still counts from the hint
    assert hint_due_in_s({"flatshare_hint": "turn", "flatshare_hint_in_s": 0.25}) == 0.25
    for bad in (None, {}, {"flatshare_hint_in_s": "0.2"}, {"flatshare_hint_in_s": True}):
        assert hint_due_in_s(bad) == 0.0
    for bad_value in (-1.0, float("nan"), float("inf")):
        assert hint_due_in_s({"flatshare_hint_in_s": bad_value}) == 0.0


def test_a_hint_that_says_when_gives_the_agents_the_steps_before_the_turn_is_due() -> None:
    """Asynchronous steps; agents prefill 12k-token prompts in 512-token chunks; a hint at 1.6 s for a
    turn at 2.0 s. Said to be due in 0.4 s, the hint lets the first steps after it carry agent chunks and
    holds only the last ones, and the turn starts as soon as with a hint that holds from the start."""

    def run(extra: dict[str, object] | None) -> tuple[float, dict[str, int]]:
        agents = [req(f"a{i}", 0.0, 12000, 50, priority=10) for i in range(3)]
        turn = req("voice", 2.0, 300, 20, priority=0)
        hinted = [SimRequest("h", 1.6, (11, 12, 13), 1, 0, "hint", extra_args=extra)] if extra else []
        config = EngineConfig(
            kv_tokens=65536,
            max_model_len=fitting_model_len(65536, 16),
            max_num_batched_tokens=512,
            async_scheduling=True,
        )
        config = config.with_changes(
            scheduler="make-room", additional_config={"make_room": {"enabled": True, "hint_window_s": 0.6}}
        )
        engine = SimEngine(config, load_profile())
        result = engine.run([*agents, *hinted, turn])
        assert all(r.status == "finished" for r in result.records)
        return by_id(result)["voice"].first_scheduled_s - 2.0, engine.scheduler.flatshare_counters()

    plain_wait, _ = run(None)
    hint_wait, hint_counts = run(HINT)
    due_wait, due_counts = run({**HINT, "flatshare_hint_in_s": 0.4})
    assert due_counts["hint_wait_steps"] > 0 and hint_counts["hint_wait_steps"] == 0
    assert 0 < due_counts["hint_hold_steps"] < hint_counts["hint_hold_steps"]
    assert due_counts["hints_fulfilled"] == hint_counts["hints_fulfilled"] == 1
    assert due_wait <= hint_wait < plain_wait


def test_a_hint_keeps_agent_prefill_out_so_the_turn_starts_sooner() -> None:
    """Agents prefill long prompts in 512-token chunks; the turn arrives while one runs. With the hint
    0.3 s earlier, the steps before the turn carry no agent prefill, and the turn starts sooner."""
    agents = [req(f"a{i}", 0.05 * i, 6000, 50, priority=10) for i in range(3)]
    turn = req("voice", 1.0, 300, 20, priority=0)
    plain, _ = simulate([*agents, turn], hint_window_s=0.5)
    hinted, engine = simulate([*agents, hint("voice-hint", 0.7), turn], hint_window_s=0.5)
    counters = engine.scheduler.flatshare_counters()
    assert counters["hints"] == 1 and counters["hints_fulfilled"] == 1 and counters["hint_hold_steps"] > 0
    wait = {
        name: by_id(r)["voice"].first_scheduled_s - 1.0 for name, r in (("plain", plain), ("hinted", hinted))
    }  # type: ignore[attr-defined]
    assert wait["hinted"] < wait["plain"]
    assert all(r.status == "finished" for r in hinted.records)


def test_a_hint_no_turn_follows_holds_at_most_its_window() -> None:
    agents = [req(f"a{i}", 0.0, 6000, 50, priority=10) for i in range(2)]
    result, engine = simulate([*agents, hint("lonely", 0.2)], hint_window_s=0.3)
    counters = engine.scheduler.flatshare_counters()
    assert counters["hints_expired"] == 1 and counters["hints_fulfilled"] == 0
    assert all(r.status == "finished" for r in result.records)


def test_hints_are_ordinary_requests_unless_enabled() -> None:
    agents = [req(f"a{i}", 0.0, 6000, 50, priority=10) for i in range(2)]
    _, engine = simulate([*agents, hint("h", 0.2), req("voice", 0.5, 300, 20)])
    assert engine.scheduler.flatshare_counters()["hints"] == 0
    for bad in ({"hint_window_s": -1}, {"hint_window_s": 11}, {"recompute_tail_tokens": -1}):
        with pytest.raises(MakeRoomConfigError):
            MakeRoomConfig.from_additional_config({"make_room": bad})


def test_a_small_protected_tail_from_the_cpu_tier_is_recomputed_not_loaded() -> None:
    """The turn's prompt left the GPU for the CPU tier during an agents' burst; its CPU-tier hit (600
    tokens) is under the bound, so it is computed in the step rather than loaded asynchronously."""
    first = req("v1", 0.0, 600, 4, priority=0, group="call")
    agents = [req(f"a{i}", 0.5, 2600, 30, priority=10) for i in range(3)]
    second = req("v2", 4.0, 650, 4, priority=0, group="call")
    requests = [first, *agents, second]

    def run(**settings: object) -> SimEngine:
        config = EngineConfig(
            kv_tokens=8192, max_model_len=4096, max_num_batched_tokens=512, cpu_tier_tokens=16384
        )
        config = config.with_changes(
            scheduler="make-room", additional_config={"make_room": {"enabled": True, **settings}}
        )
        engine = SimEngine(config, load_profile())
        result = engine.run(requests)
        assert all(r.status == "finished" for r in result.records)
        return engine

    loaded = run()
    recomputed = run(recompute_tail_tokens=1024)
    counters = recomputed.scheduler.flatshare_counters()
    assert counters["tail_recomputes"] >= 1 and 0 < counters["tail_recomputed_tokens"] < 1024
    assert loaded.cpu_tier_counters()["loaded_tokens"] > recomputed.cpu_tier_counters()["loaded_tokens"]


def test_the_window_closes_at_the_first_sentence_when_its_end_token_is_known() -> None:
    """With `sentence_end_token_ids`, a protected reply's window closes once it has sampled a sentence
    end (here its 10th token), not at T = 48: the agents get their prefill back sooner."""
    from flatshare.sim.engine import SENTENCE_END_TOKEN

    agents = [req(f"a{i}", 0.0, 6000, 50, priority=10) for i in range(2)]
    turn = SimRequest("voice", 0.5, tuple(range(5, 305)), 60, 0, "voice", first_sentence_tokens=10)
    _, fixed = simulate([*agents, turn])
    _, sentence = simulate([*agents, turn], sentence_end_token_ids=[SENTENCE_END_TOKEN])
    counters = sentence.scheduler.flatshare_counters()
    assert counters["sentence_windows_closed"] == 1
    assert counters["hold_steps"] < fixed.scheduler.flatshare_counters()["hold_steps"]
    with pytest.raises(MakeRoomConfigError, match="sentence_end_token_ids"):
        MakeRoomConfig.from_additional_config({"make_room": {"sentence_end_token_ids": ["."]}})
