"""sage (a SageSched-style Gittins-index order) in-process on vLLM's real scheduler, in the simulated engine."""

from __future__ import annotations

import pytest

from flatshare.scheduler import SageConfigError
from flatshare.sim.config import EngineConfig, fitting_model_len
from flatshare.sim.engine import SimEngine
from flatshare.sim.profile import load_profile
from flatshare.sim.requests import SimRequest
from simkit import by_id, req, run

pytestmark = pytest.mark.vllm


def sage(**settings: object) -> dict[str, object]:
    return {"scheduler": "sage", "additional_config": {"sage": {"enabled": True, **settings}}}


def long_then_shorts() -> list[SimRequest]:
    return [req("long", 0.0, 20000, 200, priority=10)] + [
        req(f"short{i}", 0.001 * (i + 1), 300, 50) for i in range(5)
    ]


def ttfts(result: object) -> dict[str, float]:
    return {rid: r.ttft_s for rid, r in by_id(result).items()}  # type: ignore[attr-defined]


def test_shorts_are_served_ahead_of_a_long_prefill() -> None:
    stock = ttfts(run(long_then_shorts(), max_num_batched_tokens=2048))
    mine_run = run(long_then_shorts(), max_num_batched_tokens=2048, **sage())
    mine = ttfts(mine_run)
    shorts = [f"short{i}" for i in range(5)]
    assert max(mine[s] for s in shorts) < 0.5 * min(stock[s] for s in shorts)
    assert mine_run.scheduler_counters["prefill_preemptions"] >= 1
    assert all(r.status == "finished" and len(r.token_times_s) == r.max_tokens for r in mine_run.records)


def test_disabled_it_is_vllm() -> None:
    stock = ttfts(run(long_then_shorts(), max_num_batched_tokens=2048))
    off = ttfts(run(long_then_shorts(), max_num_batched_tokens=2048, scheduler="sage"))
    assert off == stock


def _history_then_pair(chat_out: int, essay_out: int) -> list[SimRequest]:
    """Ten finished requests per template (`chat` answering in `chat_out` tokens, `essay` in `essay_out`),
    then a busy engine and one new request of each with the same prompt length, `essay` arriving first
    (their first tokens are the template's, so the content signature tells them apart)."""
    history = [req(f"chat{i}", 0.1 * i, 200, chat_out, group="chat") for i in range(10)]
    history += [req(f"essay{i}", 0.1 * i, 200, essay_out, group="essay") for i in range(10)]
    return [
        *history,
        req("busy", 60.0, 3000, 4),
        req("new-essay", 60.001, 200, 400, group="essay"),
        req("new-chat", 60.002, 200, 8, group="chat"),
    ]


@pytest.mark.parametrize(("chat_out", "essay_out", "first"), [(8, 400, "new-chat"), (400, 8, "new-essay")])
def test_the_request_its_history_predicts_shorter_is_admitted_first(
    chat_out: int, essay_out: int, first: str
) -> None:
    # One seat, so the pair queues for it. The cap at max_tokens is off: the prediction comes from the
    # templates' history alone (the new requests' own max_tokens are the same in both cases).
    settings = {"max_num_batched_tokens": 1024, "max_num_seqs": 1}
    result = run(
        _history_then_pair(chat_out, essay_out), **settings, **sage(cap_at_max_tokens=False, min_history=4)
    )
    records = by_id(result)
    other = "new-essay" if first == "new-chat" else "new-chat"
    assert records[first].first_scheduled_s < records[other].first_scheduled_s  # type: ignore[attr-defined]
    assert result.scheduler_counters["observed"] == len(result.records)


def test_under_the_priority_policy_the_priority_value_comes_first() -> None:
    requests = [
        req("busy", 0.0, 3000, 4, priority=0),
        req("short-low", 0.001, 100, 4, priority=10),
        req("long-high", 0.002, 4000, 4, priority=0),
    ]
    result = by_id(run(requests, policy="priority", max_num_batched_tokens=1024, max_num_seqs=2, **sage()))
    assert result["long-high"].ttft_s < result["short-low"].ttft_s  # type: ignore[attr-defined]


def test_bad_settings_fail_at_start_up() -> None:
    config = EngineConfig(
        kv_tokens=32768,
        max_model_len=fitting_model_len(32768, 16),
        **sage(aging_per_s=-1.0),  # type: ignore[arg-type]
    )
    with pytest.raises(SageConfigError, match="aging_per_s"):
        SimEngine(config, load_profile())


def test_the_index_queue_keeps_vllms_queue_contract() -> None:
    from flatshare.scheduler.sage_queue import IndexQueue

    keys = {"a": 3.0, "b": 1.0, "c": 2.0, "d": 1.0}
    items = {name: type("R", (), {"name": name})() for name in keys}
    queue = IndexQueue(lambda r: (keys[r.name],))
    for name in "abcd":
        queue.add_request(items[name])  # type: ignore[arg-type]
    assert [r.name for r in queue] == ["b", "d", "c", "a"]  # key order, ties by insertion
    assert queue.peek_request() is items["b"] and len(queue) == 4
    queue.remove_request(items["d"])  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        queue.remove_request(items["d"])  # type: ignore[arg-type]
    assert queue.pop_request() is items["b"]
    keys["b"] = 5.0  # a request put back is keyed anew (vLLM re-queues skipped and preempted ones)
    queue.prepend_requests([items["b"]])  # type: ignore[list-item]
    assert [r.name for r in queue] == ["c", "a", "b"] and queue.keys() == [(2.0,), (3.0,), (5.0,)]
    queue.remove_requests([items["c"], items["a"], items["b"]])  # type: ignore[list-item]
    assert not queue
    with pytest.raises(IndexError):
        queue.pop_request()
