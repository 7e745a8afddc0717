"""The wall-clock sampler reads /metrics with the gateway's reader: a page holding a value that is not a
finite number is a failed scrape (counted), never a NaN sample and never an exception that ends sampling."""

from __future__ import annotations

import asyncio
import math

import httpx
import pytest

from flatshare.replay.sampler import Sampler

GOOD = (
    'vllm:kv_cache_usage_perc{engine="0"} 0.5\n'
    'vllm:kv_cache_usage_perc{engine="1"} 0.25\n'
    'vllm:num_requests_running{engine="0"} 3\n'
    'vllm:num_preemptions_total{engine="0"} 7\n'
)


def scrape(page: str) -> Sampler:
    async def go() -> Sampler:
        transport = httpx.MockTransport(lambda request: httpx.Response(200, text=page))
        async with httpx.AsyncClient(transport=transport) as client:
            sampler = Sampler(client, "http://vllm", now=lambda: 1.5)
            await sampler.scrape()
            return sampler

    return asyncio.run(go())


def test_a_good_page_is_one_sample_with_the_mean_kv_use() -> None:
    sampler = scrape(GOOD)
    assert sampler.errors == 0 and len(sampler.samples) == 1
    sample = sampler.samples[0]
    assert (sample.t, sample.kv_usage, sample.running, sample.preemptions_total) == (1.5, 0.375, 3, 7)


@pytest.mark.parametrize(
    "bad",
    [
        'vllm:kv_cache_usage_perc{engine="2"} NaN\n',
        'vllm:num_requests_running{engine="1"} +Inf\n',
        'vllm:num_preemptions_total{engine="1"} -30\n',  # the sum is below zero
    ],
)
def test_a_page_with_a_value_that_is_not_a_finite_count_is_a_failed_scrape(bad: str) -> None:
    sampler = scrape(GOOD + bad)
    assert sampler.samples == [] and sampler.errors == 1
    assert sampler.last_error is not None and "ScrapeError" in sampler.last_error
    assert not any(math.isnan(s.kv_usage) for s in sampler.samples)
