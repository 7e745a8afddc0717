"""The gateway in front of a real vLLM CPU server (tiny local model) and a second backend serving the same
model (a fake that answers /tokenize with the real server's tokenizer): proxying, vLLM's own errors,
priorities, /tokenize counts, and the threshold rule moving a long request off the real server while
its KV cache is full. The session's shared server (tests/kit/shared_vllm.py); this process never imports
vLLM."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from gatewaykit import backend_rows, gateway_config, read_events, running_gateway

from flatshare.gateway.config import PollConfig, TokenConfig
from flatshare.policy.load import BackendLoad
from flatshare.policy.policies import first, threshold
from flatshare.policy.routing import RequestFeatures, ThresholdConfig, Thresholds
from flatshare.testing.vllm_server import VllmServer
from kit.fake_vllm import FakeState, fake_backend_app
from kit.net import ThreadServer, wait_for

pytestmark = pytest.mark.server

WORDS = [
    "the",
    "cat",
    "reads",
    "a",
    "long",
    "letter",
    "while",
    "the",
    "old",
    "man",
    "opens",
    "the",
    "small",
    "box",
]


@pytest.fixture(scope="module")
def backends(tiny_vllm: VllmServer) -> Iterator[tuple[VllmServer, str]]:
    """The session's shared vLLM server (tests/kit/shared_vllm.py) and a fake twin of it."""
    twin = FakeState(model="tiny", tokenize_url=f"{tiny_vllm.url}/tokenize")
    with ThreadServer(fake_backend_app(twin), log_level="critical") as other:
        yield tiny_vllm, other.url


@pytest.fixture(scope="module")
def gateway(
    backends: tuple[VllmServer, str], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, Path]]:
    real, sim_url = backends
    audit = tmp_path_factory.mktemp("audit") / "audit.jsonl"
    config = gateway_config(
        [real.url, sim_url],
        poll=PollConfig(stale_after_s=2.0),  # a server (and this test process) under load may answer late
        prefer="first",
        thresholds=ThresholdConfig(kv_usage=0.3, input_tokens=300),
        tokens=TokenConfig(source="backend", exact_min_estimate=40, timeout_s=20.0),  # a loaded CPU server
        audit_log=str(audit),
    )
    with running_gateway(config) as (_, url):
        yield url, audit


def test_requests_pass_through_to_real_vllm(gateway: tuple[str, Path]) -> None:
    url, _ = gateway
    assert [m["id"] for m in httpx.get(f"{url}/v1/models").json()["data"]] == ["tiny"]
    body: dict[str, Any] = {
        "model": "tiny",
        "prompt": [5, 6, 7, 8],
        "max_tokens": 6,
        "ignore_eos": True,
        "priority": -3,
    }
    plain = httpx.post(f"{url}/v1/completions", json=body, timeout=60)
    assert plain.status_code == 200 and plain.headers["x-flatshare-backend"] == "b0"
    assert plain.json()["usage"]["completion_tokens"] == 6
    with httpx.stream("POST", f"{url}/v1/completions", json={**body, "stream": True}, timeout=60) as response:
        events = read_events(response)
    # vLLM may put several tokens in one chunk under load: 6 tokens arrive in 1 to 6 chunks.
    assert events[-1] == "[DONE]" and 2 <= len(events) <= 7
    bad = httpx.post(f"{url}/v1/completions", json={"model": "tiny", "prompt": [1] * 2000}, timeout=60)
    assert bad.status_code == 400 and "maximum context length" in bad.json()["error"]["message"]  # vLLM's own


FILLED: list[str] = []  # how each filler request ended, quoted if the KV never fills
FILLERS = 4  # ~1000 tokens of KV each: four fill the shared server's 4064 tokens (two filled 64 blocks)


def keep_full(url: str, seed: int, stop: threading.Event) -> None:
    """Other traffic on the real server: requests of ~1000 tokens of KV each, one after another on a kept
    connection (the tiny model decodes 300 tokens in under a second, so one request would not last)."""
    body = {
        "model": "tiny",
        "prompt": [10 + seed + i % 400 for i in range(700)],
        "max_tokens": 300,
        "ignore_eos": True,
    }
    with httpx.Client(base_url=url, timeout=120) as client:
        while not stop.is_set():
            started = time.monotonic()
            try:
                status = str(client.post("/v1/completions", json=body).status_code)
            except httpx.HTTPError as exc:
                status = repr(exc)
            FILLED.append(f"{seed}:{status}:{time.monotonic() - started:.2f}s")


def replayed(line: dict[str, Any]) -> tuple[str, str]:
    """The decision the pure policy makes from what the audit line says the gateway saw."""
    snapshots = tuple(
        BackendLoad(b["name"], kv_usage=b["kv_usage"], waiting=b["waiting"], stale=b["stale"])
        for b in line["backends"]
        if b["name"] in line["candidates"]
    )
    features = RequestFeatures(line["request_id"], line["input_tokens"], 0)
    decision = threshold(features, snapshots, Thresholds(**line["thresholds"]), prefer=first)
    return decision.backend, decision.reason


@pytest.mark.load_sensitive
def test_long_requests_move_off_the_real_server_under_kv_pressure(
    backends: tuple[VllmServer, str], gateway: tuple[str, Path]
) -> None:
    """While filler clients keep the real server's KV mostly full, long requests are sent (each once the
    gateway has seen the KV over 0.3) until one is moved. Every decision must be the one the pure policy
    makes from the state the audit line records."""
    url, audit = gateway
    logged = len(audit.read_text().splitlines()) if audit.exists() else 0  # the module's earlier tests
    prompt = " ".join(WORDS * 40)
    stop = threading.Event()
    fillers = [threading.Thread(target=keep_full, args=(backends[0].url, i, stop)) for i in range(FILLERS)]
    for thread in fillers:
        thread.start()
    answers: list[httpx.Response] = []
    try:
        while len(answers) < 20 and (
            not answers or answers[-1].headers.get("x-flatshare-reason") != "kv_pressure"
        ):
            wait_for(
                lambda: (backend_rows(url)["b0"]["kv_usage"] or 0) > 0.3,
                45.0,  # on a loaded machine vLLM's API server, not its engine, is the bottleneck
                lambda: (
                    f"the real server's KV to fill: {backend_rows(url)['b0']}, {len(answers)} sent, {FILLED[-8:]}"
                ),
            )
            body = {
                "model": "tiny",
                "prompt": prompt,
                "max_tokens": 3,
                "priority": -1,
            }  # ahead of the fillers
            answers.append(httpx.post(f"{url}/v1/completions", json=body, timeout=60))
    finally:
        stop.set()
        for thread in fillers:
            thread.join(60)
    assert all(a.status_code == 200 for a in answers), [(a.status_code, a.text[:300]) for a in answers]
    wait_for(lambda: len(audit.read_text().splitlines()) >= logged + len(answers), 5.0, "the audit lines")
    lines = [json.loads(raw) for raw in audit.read_text().splitlines()][-len(answers) :]
    counted = httpx.post(f"{backends[0].url}/tokenize", json={"model": "tiny", "prompt": prompt}).json()[
        "count"
    ]
    for line, answer in zip(lines, answers, strict=True):
        assert (line["input_tokens_source"], line["input_tokens"]) == ("backend", counted)  # vLLM's tokenizer
        assert (line["backend"], line["reason"]) == replayed(line), line
        assert answer.headers["x-flatshare-reason"] == line["reason"]
    assert (lines[-1]["preferred"], lines[-1]["backend"], lines[-1]["reason"]) == ("b0", "b1", "kv_pressure")
    assert lines[-1]["backends"][0]["kv_usage"] > 0.3
    metrics = httpx.get(f"{url}/metrics").text
    assert 'flatshare_gateway_decisions_total{backend="b1",reason="kv_pressure"} 1.0' in metrics


def test_dashboard_vllm_queries_name_real_vllm_metrics(backends: tuple[VllmServer, str]) -> None:
    from test_gateway_deploy import exported, metric_names, queries

    names = exported(backends[0].url)
    used = {name for expr in queries() for name in metric_names(expr) if name.startswith("vllm:")}
    assert used <= names, used - names
