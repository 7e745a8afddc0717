"""Each gateway-side baseline acting on real HTTP traffic: the flatshare gateway in front of a serve-sim
backend (vLLM's scheduler behind vLLM's API and /metrics), clients streaming through it. The agent cap
holds the third agent stream; abort-and-resubmit closes an agent stream that has no token yet when a
voice turn comes (the backend counts the abort) and resends it, the client seeing one whole stream; flow
control holds a voice turn while the backend's KV use saturates it; Leaseholder defers an agent while a
caller speaks (an event on POST /gateway/events) and shortens a voice reply."""

from __future__ import annotations

import json
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import ExitStack
from typing import Any

import httpx
import pytest
from gatewaykit import backend_rows, gateway_config, read_events, running_gateway, scrape, sim_backends

from kit.net import wait_for

pytestmark = pytest.mark.vllm

ADMIN = "admin-token-0123456789"
LONG_PROMPT = [7] * 12000  # about 1.5 s of prefill at 256 tokens a step


@pytest.fixture(scope="module")
def sim() -> Iterator[str]:
    with sim_backends(1, kv_tokens=16384, max_model_len=16000, max_num_batched_tokens=256) as urls:
        yield urls[0]


def body(prompt: Any, priority: int, max_tokens: int, stream: bool = True) -> dict[str, Any]:
    return {
        "model": "sim",
        "prompt": prompt,
        "max_tokens": max_tokens,
        "priority": priority,
        "stream": stream,
    }


def stream_text(url: str, payload: dict[str, Any], headers: dict[str, str] | None = None) -> list[str]:
    """Stream one completion through the gateway; its events (the last is [DONE])."""
    with httpx.stream("POST", f"{url}/v1/completions", json=payload, headers=headers, timeout=60) as response:
        assert response.status_code == 200, response.read()
        return read_events(response)


def tokens_of(events: list[str]) -> int:
    text = "".join(json.loads(e)["choices"][0]["text"] for e in events if e != "[DONE]")
    return len(text.split())


def baseline(url: str, counter: str, name: str) -> float:
    return scrape(url)[f"flatshare_gateway_baseline_counter{{baseline={name},counter={counter}}}"]


def held(url: str, name: str) -> float:
    return scrape(url)[f"flatshare_gateway_baseline_held_requests{{baseline={name}}}"]


def aborts_seen_by(sim: str) -> float:
    return sum(
        v
        for k, v in scrape(sim).items()
        if k.startswith("vllm:request_success_total") and "finished_reason=abort" in k
    )


def test_agent_cap_holds_the_third_agent_stream(sim: str) -> None:
    config = gateway_config([sim], baseline="agent-cap", baseline_settings={"max_agents_per_backend": 2})
    with running_gateway(config) as (_, url), ThreadPoolExecutor(1) as pool, ExitStack() as open_streams:
        client = open_streams.enter_context(httpx.Client(base_url=url, timeout=60))
        lines = []
        for i in range(2):
            response = open_streams.enter_context(
                client.stream("POST", "/v1/completions", json=body(f"agent {i}", 10, 3000))
            )
            lines.append(response.iter_lines())
            next(line for line in lines[-1] if line.startswith("data: "))  # streaming: in flight
        third: Future[list[str]] = pool.submit(stream_text, url, body("agent 2", 10, 20))
        wait_for(lambda: held(url, "agent-cap") == 1, 10, "the third agent to be held")
        assert backend_rows(url)["b0"]["running"] == 2 and not third.done()
        open_streams.close()  # two clients leave: their requests end, a slot opens
        events = third.result(timeout=30)
        assert events[-1] == "[DONE]" and tokens_of(events) == 20
        assert baseline(url, "held_agent", "agent-cap") == 1
        assert baseline(url, "max_agents_in_flight", "agent-cap") == 2
        assert baseline(url, "held_voice", "agent-cap") == 0


def test_abort_resubmit_closes_a_tokenless_agent_stream_and_resends_it(sim: str) -> None:
    config = gateway_config([sim], baseline="abort-resubmit")
    before = aborts_seen_by(sim)
    with running_gateway(config) as (_, url), ThreadPoolExecutor(1) as pool:
        agent: Future[list[str]] = pool.submit(stream_text, url, body(LONG_PROMPT, 10, 8))
        wait_for(
            lambda: (backend_rows(url)["b0"]["kv_usage"] or 0) > 0.05, 10, "the agent's prefill to start"
        )
        voice = stream_text(
            url, body("hello, what time is it", 0, 12), {"x-flatshare-first-sentence-tokens": "3"}
        )
        assert voice[-1] == "[DONE]" and tokens_of(voice) == 12
        agent_events = agent.result(timeout=40)
        assert (
            agent_events[-1] == "[DONE]" and tokens_of(agent_events) == 8
        )  # the client saw one whole stream
        assert aborts_seen_by(sim) - before == 1  # the backend aborted the first attempt
        assert baseline(url, "aborts", "abort-resubmit") == 1
        assert baseline(url, "resubmitted", "abort-resubmit") == 1
        assert baseline(url, "wasted_prompt_tokens", "abort-resubmit") > 10000
        assert baseline(url, "abort_too_late", "abort-resubmit") == 0


def test_flow_control_holds_a_voice_turn_while_kv_use_saturates_the_pool(sim: str) -> None:
    config = gateway_config(
        [sim],
        baseline="flow-control",
        baseline_settings={"kv_cache_util_threshold": 0.3, "metrics_staleness_s": 0.5},
    )
    with running_gateway(config) as (_, url), httpx.Client(base_url=url, timeout=60) as client:
        with ThreadPoolExecutor(1) as pool:
            with client.stream("POST", "/v1/completions", json=body([9] * 8000, 10, 3000)) as filler:
                lines = filler.iter_lines()
                next(line for line in lines if line.startswith("data: "))  # decoding: its KV is held
                wait_for(
                    lambda: (backend_rows(url)["b0"]["kv_usage"] or 0) > 0.4, 10, "the filler's KV to show"
                )
                voice: Future[list[str]] = pool.submit(stream_text, url, body("are you there", 0, 6))
                wait_for(lambda: held(url, "flow-control") == 1, 10, "the voice turn to be held")
                assert baseline(url, "saturated_polls", "flow-control") > 0 and not voice.done()
            events = voice.result(timeout=30)  # the filler's client left: KV freed, the turn goes out
        assert events[-1] == "[DONE]" and tokens_of(events) == 6
        assert baseline(url, "held_voice", "flow-control") == 1
        assert baseline(url, "max_saturation_pct", "flow-control") > 100


def test_leaseholder_defers_an_agent_while_the_caller_speaks_and_shortens_the_reply(sim: str) -> None:
    config = gateway_config(
        [sim],
        admin_token=ADMIN,
        baseline="leaseholder",
        baseline_settings={"lease_s": 20, "shorten_kv_usage": 0.0, "short_max_tokens": 5},
    )
    with running_gateway(config) as (_, url), ThreadPoolExecutor(1) as pool:
        event = {"kind": "caller_speaking", "session": "caller-1", "backend": "b0"}
        assert httpx.post(f"{url}/gateway/events", json=event).status_code == 401
        auth = {"authorization": f"Bearer {ADMIN}"}
        bad = httpx.post(f"{url}/gateway/events", json={**event, "kind": "speaking"}, headers=auth)
        assert bad.status_code == 400 and "event kind must be one of" in bad.text
        answer = httpx.post(f"{url}/gateway/events", json=event, headers=auth)
        assert answer.status_code == 200 and answer.json() == {"accepted": True, "baseline": "leaseholder"}
        agent: Future[list[str]] = pool.submit(stream_text, url, body("run the tests", 10, 4))
        wait_for(lambda: held(url, "leaseholder") == 1, 10, "the agent to be deferred")
        assert not agent.done()
        turn = httpx.post(
            f"{url}/v1/completions",
            json=body("what did it say", 0, 40, stream=False),
            headers={"x-flatshare-session": "caller-1"},
            timeout=30,
        )
        assert turn.status_code == 200 and turn.json()["usage"]["completion_tokens"] == 5  # cut short
        assert tokens_of(agent.result(timeout=30)) == 4  # the turn came: the lease ended, the agent went
        counters = {
            c: baseline(url, c, "leaseholder")
            for c in ("leases", "deferred", "shortened", "events_caller_speaking")
        }
        assert counters == {"leases": 1, "deferred": 1, "shortened": 1, "events_caller_speaking": 1}
