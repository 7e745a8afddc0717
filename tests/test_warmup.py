"""`flatshare warmup` against a real HTTP server (serve-sim: vLLM's scheduler and prefix cache behind an
OpenAI-compatible API): the protected prefix is in the cache before the first turn."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from flatshare.cli import app
from flatshare.fidelity.probes import metric
from flatshare.workloads.spec import parse_spec
from kit.net import serve_sim_processes

pytestmark = pytest.mark.vllm

SPEC = "voice-agents:callers=1,agents=1,duration=60,voice_system=600"
VOCAB = 512


def prefix_hits(url: str) -> float:
    return metric(httpx.get(f"{url}/metrics", timeout=10).text, "vllm:prefix_cache_hits_total") or 0.0


def test_warmup_loads_the_voice_system_prompt_so_the_first_turn_hits_the_cache(tmp_path: Path) -> None:
    prompt = tmp_path / "system.txt"
    prompt.write_text("You are a helpful voice agent. " * 40)
    with serve_sim_processes(1) as (sim,):
        done = CliRunner().invoke(
            app, ["warmup", "--endpoint", sim.url, "--workload", SPEC, "--vocab-size", str(VOCAB)]
        )
        assert done.exit_code == 0, done.output
        assert done.output.startswith("group voice-system: 600 prompt tokens"), done.output
        # the workload's first voice turn, as `flatshare replay` sends it: its first 592 tokens (37 whole
        # blocks of 16 of the 600-token prompt) are already cached
        turn = next(r for r in parse_spec(SPEC, 0, vocab_size=VOCAB).requests() if r.cls == "voice")
        before = prefix_hits(sim.url)
        body = {"model": "sim", "prompt": list(turn.prompt_token_ids), "max_tokens": 1, "priority": 0}
        httpx.post(f"{sim.url}/v1/completions", json=body, timeout=60).raise_for_status()
        assert prefix_hits(sim.url) - before >= 592

        chat = CliRunner().invoke(app, ["warmup", "--endpoint", sim.url, "--prompt-file", str(prompt)])
        assert chat.exit_code == 0 and f"{prompt}: " in chat.output, chat.output


def test_warmup_refuses_bad_input_before_sending_anything(tmp_path: Path) -> None:
    empty = tmp_path / "empty.txt"
    empty.write_text("  \n")
    cases = [
        (["--endpoint", "http://127.0.0.1:9"], "give --prompt-file (one or more) or --workload"),
        (["--endpoint", "http://127.0.0.1:9", "--prompt-file", str(empty)], "empty prompt file"),
        (["--endpoint", "http://127.0.0.1:9", "--workload", "agents:n=2,duration=60"], "has a shared prefix"),
        (["--endpoint", "http://127.0.0.1:9", "--workload", SPEC, "--api", "x"], "--api must be chat"),
    ]
    for args, message in cases:
        done = CliRunner().invoke(app, ["warmup", *args])
        assert done.exit_code == 2 and message in done.output, (args, done.output)


def test_an_unreachable_server_is_an_error_naming_it() -> None:
    done = CliRunner().invoke(app, ["warmup", "--endpoint", "http://127.0.0.1:9", "--workload", SPEC])
    assert done.exit_code == 2 and "http://127.0.0.1:9/v1/models" in done.output, done.output
