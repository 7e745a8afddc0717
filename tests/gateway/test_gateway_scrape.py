"""Reading vLLM's /metrics, and cutting event streams into whole events."""

from __future__ import annotations

import json

import pytest

from flatshare.gateway.sse import DONE, EventFramer, token_events
from flatshare.protocol.prometheus import WANTED, ScrapeError, parse_load, select_lines

VLLM_PAGE = """\
# HELP python_gc_objects_collected_total Objects collected during gc
# TYPE python_gc_objects_collected_total counter
python_gc_objects_collected_total{generation="0"} 1234.0
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 3.0
vllm:num_requests_running{engine="1",model_name="m"} 2.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="m"} 4.0
vllm:num_requests_waiting{engine="1",model_name="m"} 0.0
# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.25
vllm:kv_cache_usage_perc{engine="1",model_name="m"} 0.875
# HELP vllm:num_preemptions_total Cumulative number of preemption from the engine.
# TYPE vllm:num_preemptions_total counter
vllm:num_preemptions_total{engine="0",model_name="m"} 7.0
vllm:num_preemptions_total{engine="1",model_name="m"} 1.0
# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{block_size="16",engine="0",num_gpu_blocks="2048"} 1.0
# HELP vllm:time_to_first_token_seconds Histogram of time to first token in seconds.
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.001",model_name="m"} 0.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf",model_name="m"} 9.0
vllm:time_to_first_token_seconds_count{engine="0",model_name="m"} 9.0
vllm:time_to_first_token_seconds_sum{engine="0",model_name="m"} 1.5
"""


def test_reads_what_a_router_needs_across_engines() -> None:
    metrics = parse_load(VLLM_PAGE)
    assert metrics.kv_usage == 0.875  # the fullest engine
    assert (metrics.running, metrics.waiting, metrics.preemptions) == (5, 4, 8.0)
    assert metrics.kv_capacity_tokens == 2048 * 16


def test_filter_keeps_only_the_wanted_families() -> None:
    kept = select_lines(VLLM_PAGE, WANTED)
    assert "python_gc" not in kept and "time_to_first_token" not in kept
    assert kept.count("vllm:kv_cache_usage_perc{") == 2


def test_serve_sim_page_parses() -> None:
    page = (
        "# TYPE vllm:kv_cache_usage_perc gauge\n"
        'vllm:kv_cache_usage_perc{engine="0",model_name="sim"} 0.5\n'
        "# TYPE vllm:num_preemptions counter\n"
        'vllm:num_preemptions_total{engine="0",model_name="sim"} 2.0\n'
        'vllm:num_preemptions_created{engine="0",model_name="sim"} 1.7e9\n'
    )
    metrics = parse_load(page)
    assert (metrics.kv_usage, metrics.preemptions, metrics.running, metrics.kv_capacity_tokens) == (
        0.5,
        2.0,
        0,
        None,
    )


@pytest.mark.parametrize("page", ["", "<html>not metrics</html>", "vllm:num_requests_running 1\n"])
def test_a_page_without_kv_use_is_an_error(page: str) -> None:
    with pytest.raises(ScrapeError, match="kv_cache_usage_perc"):
        parse_load(page)


def event(choice: dict[str, object]) -> bytes:
    return b"data: " + json.dumps({"choices": [choice]}).encode() + b"\n\n"


def test_framer_passes_whole_events_only() -> None:
    framer = EventFramer()
    first, second = event({"text": "a"}), event({"text": "b"})
    stream = first + second + DONE
    assert framer.feed(stream[:10]) == b""
    assert framer.feed(stream[10 : len(first) + 3]) == first
    assert framer.first_token and not framer.done
    assert framer.feed(stream[len(first) + 3 :]) == second + DONE
    assert framer.done and framer.flush() == b""


def test_framer_flags_a_stream_cut_short() -> None:
    framer = EventFramer()
    assert framer.feed(event({"text": "a"}) + b'data: {"choi') == event({"text": "a"})
    assert not framer.done
    assert framer.flush() == b'data: {"choi'


@pytest.mark.parametrize(
    ("raw", "token"),
    [
        (event({"delta": {"role": "assistant", "content": ""}}), False),
        (event({"delta": {"content": "hi"}}), True),
        (event({"text": ""}), False),
        (event({"text": "", "finish_reason": "length"}), True),
        (event({"delta": {"reasoning_content": "hmm"}}), True),
        (b'data: {"choices":[],"usage":{"prompt_tokens":1}}\n\n', False),
        (DONE, False),
        (b"data: not json\n\n", False),
        (b": keep-alive comment\n\n", False),
    ],
)
def test_which_events_carry_tokens(raw: bytes, token: bool) -> None:
    assert token_events(raw) == int(token)
