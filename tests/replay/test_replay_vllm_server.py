"""One small voice-plus-agents workload replayed three ways: against a real vLLM CPU server (the tiny
local model), against serve-sim, and through `--sim`. All three record files pass the same schema
check and hold every request of the workload."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from flatshare.replay.command import replay_command
from flatshare.runfiles.records import RECORD_VERSION
from flatshare.runfiles.samples import read_samples
from flatshare.sim.options import EngineOptions
from flatshare.testing.vllm_server import VllmServer
from flatshare.workloads.spec import parse_spec
from kit.net import ThreadServer
from kit.replay import checked_records
from kit.shared_vllm import SHARED_SETTINGS

pytestmark = [pytest.mark.server, pytest.mark.vllm]

SPEC = "voice-agents:callers=3,agents=2,duration=12,turns=2,agent_stagger=1"
SEED, MODEL_LEN, VOCAB = 4, 1024, 512  # the tiny model has 512 token ids
COMMON = {"seed": SEED, "max_model_len": MODEL_LEN, "vocab_size": VOCAB, "show_progress": False}


@pytest.fixture(scope="module")
def vllm_server(tiny_vllm: VllmServer) -> VllmServer:
    """The session's shared server (tests/kit/shared_vllm.py): 128 blocks, max_model_len 1024."""
    assert SHARED_SETTINGS["max_model_len"] == MODEL_LEN
    return tiny_vllm


@pytest.fixture(scope="module")
def runs(vllm_server: VllmServer, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    from flatshare.serve.server import build_sim_app
    from flatshare.sim.config import EngineConfig
    from flatshare.sim.profile import load_profile

    out = {name: tmp_path_factory.mktemp(name) for name in ("vllm", "serve-sim", "sim")}
    replay_command(SPEC, out["vllm"], endpoints=[vllm_server.url], **COMMON)  # type: ignore[arg-type]
    app = build_sim_app(EngineConfig(max_model_len=MODEL_LEN, kv_tokens=8192), load_profile())
    with ThreadServer(app) as sim_server:
        replay_command(SPEC, out["serve-sim"], endpoints=[sim_server.url], **COMMON)  # type: ignore[arg-type]
    replay_command(SPEC, out["sim"], sim=True, engine=EngineOptions(kv_tokens=8192), **COMMON)  # type: ignore[arg-type]
    return out


def test_all_three_record_files_pass_the_schema_and_hold_every_request(runs: dict[str, Path]) -> None:
    expected = {r.id for r in parse_spec(SPEC, SEED, max_model_len=MODEL_LEN, vocab_size=VOCAB).requests()}
    assert len(expected) >= 4
    for name, folder in runs.items():
        rows = checked_records(folder / "requests.jsonl")
        assert {r["id"] for r in rows} == expected, name
        assert all(r["status"] == "ok" for r in rows), (name, [r["error"] for r in rows])
        run = json.loads((folder / "run.json").read_text())
        assert run["requests"] == len(expected) and run["record_version"] == RECORD_VERSION, name


def test_the_real_server_streams_every_token_and_exposes_its_metrics(
    runs: dict[str, Path], vllm_server: VllmServer
) -> None:
    rows = checked_records(runs["vllm"] / "requests.jsonl")
    for row in rows:  # ignore_eos: the model runs to max_tokens; continuous usage counts each token
        assert row["output_tokens"] == row["max_tokens"] and row["finish_reason"] == "length"
        assert row["first_token_s"] > row["send_s"] and row["end_s"] == row["token_times_s"][-1]
    samples = read_samples(runs["vllm"] / "samples.jsonl")
    assert len(samples) >= 5 and {engine for engine, _ in samples} == {vllm_server.url}
    assert all(0 <= s.kv_usage <= 1 and s.running >= 0 for _, s in samples)
    run = json.loads((runs["vllm"] / "run.json").read_text())
    assert run["endpoints"] == [
        {"url": vllm_server.url, "model": "tiny", "max_model_len": MODEL_LEN, "error": None}
    ]
