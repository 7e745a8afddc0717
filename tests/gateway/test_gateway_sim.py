"""The gateway in front of two serve-sim backends (vLLM's scheduler behind vLLM's API and /metrics):
the threshold rule moves a long request off the backend whose KV is full, and says so."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from gatewaykit import backend_rows, gateway_config, read_events, running_gateway, scrape, sim_backends

from flatshare.gateway.config import TokenConfig
from flatshare.policy.routing import ThresholdConfig
from kit.net import wait_for

pytestmark = pytest.mark.vllm


@pytest.fixture(scope="module")
def sims() -> Iterator[list[str]]:
    with sim_backends(2, kv_tokens=4096, max_model_len=4000) as urls:
        yield urls


def test_long_request_is_routed_away_from_the_full_backend(sims: list[str], tmp_path: Path) -> None:
    audit = tmp_path / "audit.jsonl"
    config = gateway_config(
        sims,
        prefer="first",
        thresholds=ThresholdConfig(kv_usage=0.5, input_tokens=1000),
        tokens=TokenConfig(source="backend", exact_min_estimate=500),
        audit_log=str(audit),
    )
    long_prompt = " ".join(f"w{i}" for i in range(1500))  # 1500 tokens for serve-sim's tokenizer
    with running_gateway(config) as (_, url), httpx.Client(base_url=url, timeout=30) as client:
        filler = {"model": "sim", "prompt": [7] * 3000, "max_tokens": 400, "stream": True}
        with client.stream("POST", "/v1/completions", json=filler) as held:
            assert held.headers["x-flatshare-backend"] == "b0"
            lines = held.iter_lines()  # kept: dropping the iterator would close the stream
            next(line for line in lines if line.startswith("data: "))  # it is decoding: its KV is held
            wait_for(lambda: (backend_rows(url)["b0"]["kv_usage"] or 0) > 0.7, 5.0, "b0's KV use to show")
            moved = client.post(
                "/v1/completions", json={"model": "sim", "prompt": long_prompt, "max_tokens": 4}
            )
            short = client.post(
                "/v1/completions", json={"model": "sim", "prompt": "hello there", "max_tokens": 4}
            )
        assert moved.status_code == 200 and moved.json()["usage"]["prompt_tokens"] == 1500
        assert (moved.headers["x-flatshare-backend"], moved.headers["x-flatshare-reason"]) == (
            "b1",
            "kv_pressure",
        )
        assert short.headers["x-flatshare-backend"] == "b0"
        wait_for(lambda: backend_rows(url)["b0"]["kv_usage"] == 0.0, 5.0, "the filler to be aborted")
        stays = client.post("/v1/completions", json={"model": "sim", "prompt": long_prompt, "max_tokens": 4})
        assert (stays.headers["x-flatshare-backend"], stays.headers["x-flatshare-reason"]) == (
            "b0",
            "below_kv_threshold",
        )
        metrics = scrape(url)
        wait_for(
            lambda: len(audit.read_text().splitlines()) == 4 if audit.exists() else False, 5.0, "audit lines"
        )
    decision = [json.loads(raw) for raw in audit.read_text().splitlines()][1]
    assert (decision["preferred"], decision["backend"], decision["reason"]) == ("b0", "b1", "kv_pressure")
    assert (decision["input_tokens"], decision["input_tokens_source"]) == (1500, "backend")
    kv_seen = decision["backends"][0]["kv_usage"]
    assert kv_seen > 0.7 and decision["backends"][1]["kv_usage"] == 0.0
    assert decision["backends"][0]["scrape_age_s"] < 0.5
    assert metrics["flatshare_gateway_decisions_total{backend=b1,reason=kv_pressure}"] == 1
    assert metrics["flatshare_gateway_decision_kv_usage_sum{reason=kv_pressure}"] == pytest.approx(
        kv_seen, abs=0.02
    )
    assert metrics["flatshare_gateway_input_tokens_count{class=default}"] == 4


def test_streams_match_going_direct(sims: list[str]) -> None:
    config = gateway_config(sims[:1], policy="round-robin")
    messages = [{"role": "user", "content": "tell me about the river"}]
    body = {"model": "sim", "messages": messages, "max_tokens": 12, "stream": True}
    with running_gateway(config) as (_, url):
        with httpx.stream("POST", f"{url}/v1/chat/completions", json=body, timeout=30) as via:
            through = read_events(via)
        with httpx.stream("POST", f"{sims[0]}/v1/chat/completions", json=body, timeout=30) as direct:
            straight = read_events(direct)
        text = [
            "".join(json.loads(e)["choices"][0]["delta"].get("content", "") for e in s[:-1])
            for s in (through, straight)
        ]
        assert text[0] == text[1] and len(text[0].split()) == 12
        assert through[-1] == straight[-1] == "[DONE]"
        assert httpx.get(f"{url}/v1/models").json()["data"][0]["id"] == "sim"
        assert scrape(url)["flatshare_gateway_upstream_ttft_seconds_count{class=default}"] == 1
