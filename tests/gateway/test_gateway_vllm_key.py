"""The gateway in front of a real vLLM CPU server started with `--api-key` (tiny local model, ~30 s to
start): with `backend_api_key` the backend is healthy, its models known, /tokenize counts exact and
requests answered; without it the same backend is never healthy (issue 16, item 1)."""

from __future__ import annotations

import importlib.util
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from gatewaykit import gateway_config, running_gateway

from flatshare.gateway.config import TokenConfig
from flatshare.testing.vllm_server import VllmServer, VllmServerConfig
from kit.net import wait_for

pytestmark = pytest.mark.server

KEY = "sk-vllm-backend-key-7"


@pytest.fixture(scope="module")
def keyed_vllm(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    if importlib.util.find_spec("vllm") is None:
        pytest.skip("vLLM is not installed")
    config = VllmServerConfig(
        model=tiny_model, num_gpu_blocks=64, max_num_seqs=4, extra_args=("--api-key", KEY)
    )
    with VllmServer(config, log_dir=tmp_path_factory.mktemp("vllm-log")) as server:
        yield server.url


def test_the_server_requires_its_key(keyed_vllm: str) -> None:
    assert httpx.get(f"{keyed_vllm}/v1/models", timeout=10).status_code == 401


def test_with_backend_api_key_a_keyed_vllm_serves(keyed_vllm: str) -> None:
    tokens = TokenConfig(source="backend", exact_min_estimate=0, timeout_s=10.0)
    config = gateway_config([keyed_vllm], backend_api_key=KEY, tokens=tokens)
    with running_gateway(config) as (gateway, gw):
        wait_for(lambda: gateway.pool.states[0].healthy, 20, "the keyed vLLM to be healthy")
        models = httpx.get(f"{gw}/v1/models", timeout=10).json()["data"]
        body = {"prompt": "the cat reads a long letter", "max_tokens": 4}
        answer = httpx.post(f"{gw}/v1/completions", json=body, timeout=60)
        audit_source = gateway.metrics.render().decode()
    assert [m["id"] for m in models] and answer.status_code == 200, answer.text[:300]
    assert answer.json()["choices"][0]["text"] is not None
    assert 'flatshare_gateway_errors_total{kind="tokenize"} 0.0' in audit_source  # /tokenize took the key


def test_without_it_the_same_vllm_is_never_healthy(keyed_vllm: str) -> None:
    with running_gateway(gateway_config([keyed_vllm])) as (gateway, gw):
        time.sleep(1.0)  # many polls
        state = gateway.pool.states[0]
        answer = httpx.post(f"{gw}/v1/completions", json={"prompt": "hi", "max_tokens": 2}, timeout=10)
    assert not state.healthy and "401" in (state.last_error or "")
    assert answer.status_code == 503
