"""Reading completion streams and /metrics: event splitting, exact token counts, metric parsing."""

from __future__ import annotations

import pytest

from flatshare.errors import InputError
from flatshare.protocol.prometheus import MetricsPage, ScrapeError
from flatshare.protocol.sse import SseSplitter, StreamTally
from flatshare.replay.endpoints import normalize_url, sticky_index
from flatshare.replay.sampler import read_sample


def test_splitter_joins_events_split_across_reads() -> None:
    splitter = SseSplitter()
    assert splitter.feed(b'data: {"a"') == []
    assert splitter.pending
    assert splitter.feed(b": 1}\r\n\r\ndata: [DO") == ['{"a": 1}']
    assert splitter.feed(b"NE]\n\n: a comment\n\n") == ["[DONE]"]
    assert not splitter.pending


def _chunk(text: str, completion_tokens: int | None = None, finish: str | None = None) -> dict[str, object]:
    chunk: dict[str, object] = {"choices": [{"index": 0, "text": text, "finish_reason": finish}]}
    if completion_tokens is not None:
        chunk["usage"] = {"completion_tokens": completion_tokens}
    return chunk


def test_continuous_usage_counts_tokens_exactly() -> None:
    tally = StreamTally()
    tally.add(_chunk("a", 1), 1.0)
    tally.add(_chunk("", 2), 1.1)  # vLLM sends tokens that decode to no text yet
    tally.add(_chunk("bcd", 5), 1.2)  # three tokens in one chunk
    tally.add(_chunk("e", 6, "length"), 1.3)
    tally.add({"choices": [], "usage": {"completion_tokens": 6}}, 1.4)
    assert tally.token_times_s == [1.0, 1.1, 1.2, 1.2, 1.2, 1.3]
    assert tally.finish_reason == "length" and tally.end_s == 1.3


def test_without_usage_a_chunk_with_text_is_one_token_and_the_final_usage_fills_in() -> None:
    tally = StreamTally()
    tally.add(_chunk(" a"), 1.0)
    tally.add(_chunk(" b c"), 1.5)
    tally.add(_chunk("", finish="length"), 1.6)
    assert tally.token_times_s == [1.0, 1.5]
    tally.add({"choices": [], "usage": {"completion_tokens": 3}}, 1.7)
    assert tally.token_times_s == [1.0, 1.5, 1.5]  # at the last token-bearing chunk, not later
    assert tally.end_s == 1.6


def test_an_error_chunk_is_kept_with_its_code() -> None:
    tally = StreamTally()
    tally.add({"error": {"message": "Token id 599 is out of vocabulary", "code": 400}}, 0.1)
    tally.add({"error": {"message": "second"}}, 0.2)
    assert tally.error == "Token id 599 is out of vocabulary" and tally.error_code == 400
    tally = StreamTally()
    tally.add(["not", "an", "object"], 0.1)
    assert tally.error is not None and "not a JSON object" in tally.error


VLLM_METRICS = """\
# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="my model {x}"} 0.5
vllm:kv_cache_usage_perc{engine="1",model_name="my model {x}"} 0.25
vllm:num_requests_running{engine="0",model_name="m"} 3.0
vllm:num_requests_running{engine="1",model_name="m"} 2.0
vllm:num_requests_waiting{engine="0",model_name="m"} 4.0
vllm:num_preemptions_total{engine="0",model_name="m"} 7.0
vllm:num_preemptions_created{engine="0",model_name="m"} 1.7e9
vllm:time_to_first_token_seconds_bucket{le="0.001",model_name="m"} 0.0
vllm:num_requests_running_extra 99
"""


def test_metrics_are_parsed_and_aggregated_over_engines() -> None:
    assert MetricsPage.parse(VLLM_METRICS).values("vllm:kv_cache_usage_perc") == [0.5, 0.25]
    sample = read_sample(VLLM_METRICS, 2.0)
    assert (sample.t, sample.kv_usage, sample.running, sample.waiting) == (2.0, 0.375, 5, 4)
    assert (sample.preemptions_total, sample.cpu_tier_blocks) == (7, 0)
    with pytest.raises(ScrapeError, match="kv_cache_usage_perc"):
        read_sample("vllm:num_requests_running 1\n", 0.0)


def test_endpoint_urls_are_normalized_and_bad_ones_refused() -> None:
    assert normalize_url("http://127.0.0.1:8000/v1/") == "http://127.0.0.1:8000"
    assert normalize_url(" https://h/prefix ") == "https://h/prefix"
    for bad in ("127.0.0.1:8000", "ftp://h", "http://", "http://h/?q=1"):
        with pytest.raises(InputError, match="base URL"):
            normalize_url(bad)


def test_sticky_index_spreads_sessions_and_keeps_each_on_one_endpoint() -> None:
    ids = [f"agent/{i}" for i in range(40)]
    assert {sticky_index(s, 3) for s in ids} == {0, 1, 2}
    assert all(sticky_index(s, 3) == sticky_index(s, 3) for s in ids)
    assert all(sticky_index(s, 1) == 0 for s in ids)
