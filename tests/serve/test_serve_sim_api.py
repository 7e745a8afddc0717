"""serve-sim over real HTTP: OpenAI routes, streaming paced in wall time, errors, aborts, /metrics."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import httpx
import pytest
from servekit import STEP_S, Stream, scrape, sim_server, stream

from flatshare.serve.tokenizer import WORDS

pytestmark = pytest.mark.vllm

MAX_MODEL_LEN = 2048


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    with sim_server(kv_tokens=8192, max_model_len=MAX_MODEL_LEN) as base:
        yield base


def _post(url: str, path: str, body: object) -> httpx.Response:
    return httpx.post(f"{url}{path}", json=body, timeout=10)


def _stream(url: str, path: str, body: dict[str, object]) -> Stream:
    async def go() -> Stream:
        async with httpx.AsyncClient(base_url=url, timeout=10) as client:
            return await stream(client, path, body)

    return asyncio.run(go())


def test_health_and_models(url: str) -> None:
    assert httpx.get(f"{url}/health").status_code == 200
    models = httpx.get(f"{url}/v1/models").json()
    assert [m["id"] for m in models["data"]] == ["sim"]
    assert models["data"][0]["max_model_len"] == MAX_MODEL_LEN


def test_streaming_completion_paces_tokens_in_wall_time(url: str) -> None:
    n = 24
    out = _stream(url, "/v1/completions", {"prompt": "tell me a story", "max_tokens": n, "model": "sim"})
    pieces = out.pieces()
    assert out.done
    assert len(pieces) == n and all(len(text.split()) == 1 for _, text in pieces)
    assert all(text.split()[0] in WORDS for _, text in pieces)
    reasons = [c["choices"][0]["finish_reason"] for c in out.chunks]
    assert reasons == [None] * (n - 1) + ["length"]
    times = [t for t, _ in pieces]
    assert times == sorted(times)
    # One decode step per token, each priced at >= step_fixed_s: the stream cannot arrive faster.
    assert times[-1] - times[0] >= 0.9 * (n - 1) * STEP_S
    assert times[-1] - times[0] < 10 * n * STEP_S


def test_non_streaming_completion_counts_usage(url: str) -> None:
    body = _post(url, "/v1/completions", {"prompt": list(range(100, 137)), "max_tokens": 7}).json()
    assert body["object"] == "text_completion"
    assert body["usage"] == {"prompt_tokens": 37, "completion_tokens": 7, "total_tokens": 44}
    assert len(body["choices"][0]["text"].split()) == 7
    assert body["choices"][0]["finish_reason"] == "length"


def test_text_prompt_usage_matches_tokenize(url: str) -> None:
    prompt = "Hello, world! How are you today?"
    tokenized = _post(url, "/tokenize", {"prompt": prompt}).json()
    assert tokenized["count"] == len(tokenized["tokens"]) == 9
    assert tokenized["max_model_len"] == MAX_MODEL_LEN
    for shape in (prompt, [prompt], [tokenized["tokens"]]):
        usage = _post(url, "/v1/completions", {"prompt": shape, "max_tokens": 2}).json()["usage"]
        assert usage["prompt_tokens"] == 9


def test_chat_completion_streaming_and_not(url: str) -> None:
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi there"}]
    count = _post(url, "/tokenize", {"messages": messages}).json()["count"]
    body = _post(url, "/v1/chat/completions", {"messages": messages, "max_tokens": 5}).json()
    assert body["object"] == "chat.completion"
    assert body["choices"][0]["message"]["role"] == "assistant"
    assert len(body["choices"][0]["message"]["content"].split()) == 5
    assert body["usage"] == {"prompt_tokens": count, "completion_tokens": 5, "total_tokens": count + 5}

    req = {"messages": messages, "max_completion_tokens": 6, "stream_options": {"include_usage": True}}
    out = _stream(url, "/v1/chat/completions", req)
    assert out.done
    assert out.chunks[0]["object"] == "chat.completion.chunk"
    assert out.chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    assert len(out.text(chat=True).split()) == 6
    assert out.chunks[-1]["choices"] == [] and out.chunks[-1]["usage"]["completion_tokens"] == 6
    assert out.chunks[-2]["choices"][0]["finish_reason"] == "length"


@pytest.mark.parametrize(
    "path, body, status, fragment",
    [
        ("/v1/completions", b"{oops", 400, "not valid JSON"),
        ("/v1/completions", {"max_tokens": 3}, 400, "'prompt' is required"),
        ("/v1/completions", {"prompt": "hi", "max_tokens": 0}, 400, "max_tokens must be at least 1"),
        ("/v1/completions", {"prompt": [7] * (MAX_MODEL_LEN + 1)}, 400, "maximum context length is 2048"),
        ("/v1/completions", {"prompt": [7] * 2000, "max_tokens": 100}, 400, "for a total of 2100 tokens"),
        ("/v1/completions", {"prompt": "hi", "model": "llama"}, 404, "The model `llama` does not exist."),
        ("/v1/chat/completions", {"messages": []}, 400, "'messages' must be a non-empty list"),
        ("/tokenize", {"prompt": 3}, 400, "'prompt' must be a string"),
    ],
)
def test_bad_input_gets_an_openai_error(
    url: str, path: str, body: object, status: int, fragment: str
) -> None:
    if isinstance(body, bytes):
        response = httpx.post(f"{url}{path}", content=body, timeout=10)
    else:
        response = _post(url, path, body)
    assert response.status_code == status
    error = response.json()["error"]
    assert fragment in error["message"]
    assert error["code"] == status
    assert error["type"] == ("BadRequestError" if status == 400 else "NotFoundError")


def test_client_disconnect_aborts_the_request_and_frees_kv(url: str) -> None:
    before = scrape(url)
    body = {"prompt": [5] * 800, "max_tokens": 1000, "stream": True}
    with httpx.stream("POST", f"{url}/v1/completions", json=body, timeout=10) as response:
        data = (line for line in response.iter_lines() if line.startswith("data: "))
        assert len([next(data) for _ in range(3)]) == 3
        mid = scrape(url)
    assert mid["vllm:num_requests_running"] == 1 and mid["vllm:kv_cache_usage_perc"] > 0
    _assert_aborted(url, before)


def test_non_streaming_client_that_gives_up_aborts_too(url: str) -> None:
    before = scrape(url)
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(f"{url}/v1/completions", json={"prompt": [6] * 500, "max_tokens": 1000}, timeout=0.5)
    _assert_aborted(url, before)


def _assert_aborted(url: str, before: dict[str, float]) -> None:
    """The one request in flight ends as an abort within a few steps, its KV blocks freed."""
    deadline = time.monotonic() + 3
    after = scrape(url)
    while after["vllm:num_requests_running"] and time.monotonic() < deadline:
        time.sleep(0.02)
        after = scrape(url)
    assert after["vllm:num_requests_running"] == 0
    assert after["vllm:kv_cache_usage_perc"] == 0
    assert after["vllm:request_success_total{abort}"] == before["vllm:request_success_total{abort}"] + 1
    assert after["vllm:request_success_total{length}"] == before["vllm:request_success_total{length}"]
    assert after["vllm:generation_tokens_total"] - before["vllm:generation_tokens_total"] < 200


def test_repeated_prompt_hits_the_prefix_cache(url: str) -> None:
    prompt = " ".join(f"w{i}" for i in range(300))
    before = scrape(url)
    for _ in range(2):
        assert _post(url, "/v1/completions", {"prompt": prompt, "max_tokens": 1}).status_code == 200
    after = scrape(url)
    hits = after["vllm:prefix_cache_hits_total"] - before["vllm:prefix_cache_hits_total"]
    queries = after["vllm:prefix_cache_queries_total"] - before["vllm:prefix_cache_queries_total"]
    assert queries >= 600
    assert 256 <= hits < 300  # the second request finds its full blocks cached
    assert after["vllm:prompt_tokens_total"] - before["vllm:prompt_tokens_total"] == 600


def test_metrics_use_vllm_names(url: str) -> None:
    text = httpx.get(f"{url}/metrics").text
    for name in (
        "vllm:kv_cache_usage_perc",
        "vllm:num_requests_running",
        "vllm:num_requests_waiting",
        "vllm:num_preemptions_total",
        "vllm:prompt_tokens_total",
        "vllm:generation_tokens_total",
        "vllm:prefix_cache_queries_total",
        "vllm:prefix_cache_hits_total",
        'vllm:request_success_total{engine="0",finished_reason="length",model_name="sim"}',
        "vllm:time_to_first_token_seconds_bucket",
    ):
        assert name in text, name
    assert 'num_gpu_blocks="512"' in text and 'block_size="16"' in text
