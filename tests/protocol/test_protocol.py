"""The wire contracts written once: metrics aggregation rules, /v1/models, the stream reader, token ids."""

from __future__ import annotations

import hashlib
import json
import math

import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest

from flatshare.protocol.models import first_model, model_cards
from flatshare.protocol.prometheus import PREEMPTIONS, MetricsPage, combine, kv_capacity_tokens, parse_load
from flatshare.protocol.prompt_ids import FIRST_ID, piece_id, split_words
from flatshare.protocol.sse import StreamReader

PAGE = """\
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0"} 0.5
vllm:kv_cache_usage_perc{engine="1"} 0.25
# TYPE vllm:request_queue_time_seconds histogram
vllm:request_queue_time_seconds_bucket{engine="0",le="1.0"} 2.0
vllm:request_queue_time_seconds_bucket{engine="0",le="+Inf"} 3.0
vllm:request_queue_time_seconds_bucket{engine="1",le="1.0"} 1.0
vllm:request_queue_time_seconds_bucket{engine="1",le="+Inf"} 5.0
vllm:request_queue_time_seconds_sum{engine="0"} 4.0
vllm:request_queue_time_seconds_count{engine="0"} 3.0
vllm:cache_config_info{block_size="16",num_gpu_blocks="100"} 1.0
python_gc_objects_collected_total{generation="0"} 12.0
"""


def test_each_call_names_its_aggregation_rule() -> None:
    page = MetricsPage.parse(PAGE)
    assert page.values("vllm:kv_cache_usage_perc") == [0.5, 0.25]
    assert [page.value("vllm:kv_cache_usage_perc", rule) for rule in ("max", "mean", "sum")] == [
        0.5,
        0.375,
        0.75,
    ]
    assert page.value("vllm:nothing", "sum") is None
    assert page.buckets("vllm:request_queue_time_seconds", "sum") == {1.0: 3.0, math.inf: 8.0}
    assert page.buckets("vllm:request_queue_time_seconds", "max") == {1.0: 2.0, math.inf: 5.0}
    assert kv_capacity_tokens(page.labels("vllm:cache_config_info")[0]) == 1600
    assert kv_capacity_tokens({"block_size": "16"}) is None
    assert combine([1.0, 2.0], "mean") == 1.5


def test_only_the_named_families_are_parsed() -> None:
    page = MetricsPage.parse(PAGE + "not prometheus at all {\n", ("vllm:kv_cache_usage_perc",))
    assert set(page.samples) == {"vllm:kv_cache_usage_perc"}
    with pytest.raises(ValueError):
        MetricsPage.parse(PAGE + "not prometheus at all {\n")


def test_models_answer() -> None:
    assert first_model({"data": [{"id": "m", "max_model_len": 4096}, {"id": "n"}]}) == ("m", 4096)
    assert first_model({"data": [{"id": "m", "max_model_len": True}]}) == ("m", None)
    for bad in ({"data": "x"}, [], {"data": [1]}):
        with pytest.raises(ValueError):
            model_cards(bad)
    with pytest.raises(IndexError):
        first_model({"data": []})


def test_stream_reader_tallies_events_split_across_reads() -> None:
    reader = StreamReader()
    chunk = json.dumps(
        {"choices": [{"text": "a", "finish_reason": "length"}], "usage": {"completion_tokens": 2}}
    )
    reader.feed(f"data: {chunk}".encode(), 1.0)
    reader.feed(b"\n\ndata: [DONE]\n\n", 2.0)
    assert (reader.tally.token_times_s, reader.tally.finish_reason, reader.tally.done) == (
        [2.0, 2.0],
        "length",
        True,
    )
    with pytest.raises(ValueError):
        reader.feed(b"data: {oops\n\n", 3.0)


def test_token_pieces_and_ids() -> None:
    assert split_words("Hello, world!") == ["Hello", ",", "world", "!"]
    assert (
        piece_id("x", 32000)
        == 4 + int.from_bytes(hashlib.blake2b(b"x", digest_size=8).digest(), "little") % 31996
    )
    assert all(FIRST_ID <= piece_id(str(k), 5) < 5 for k in range(50))


def test_the_preemption_counter_is_read_in_both_exposition_styles() -> None:
    """vLLM registers `vllm:num_preemptions`; the page carries the sample `vllm:num_preemptions_total`
    under a `# TYPE` named after the sample (Prometheus text, as prometheus_client writes it) or after the
    family (OpenMetrics style), with a `_created` series beside it. One constant reads both."""
    registry = CollectorRegistry()
    counter = Counter("vllm:num_preemptions", "preemptions", ["engine"], registry=registry)
    counter.labels("0").inc(3)
    counter.labels("1").inc(2)
    gauge = Gauge("vllm:kv_cache_usage_perc", "kv", ["engine"], registry=registry)
    gauge.labels("0").set(0.5)
    prometheus_text = generate_latest(registry).decode()
    assert (
        f"# TYPE {PREEMPTIONS} counter" in prometheus_text
        and "vllm:num_preemptions_created" in prometheus_text
    )
    openmetrics_style = (
        'vllm:kv_cache_usage_perc{engine="0"} 0.5\n'
        "# TYPE vllm:num_preemptions counter\n"
        'vllm:num_preemptions_total{engine="0"} 5.0\n'
        'vllm:num_preemptions_created{engine="0"} 1.7e9\n'
    )
    assert parse_load(prometheus_text).preemptions == 5.0
    assert parse_load(openmetrics_style).preemptions == 5.0
