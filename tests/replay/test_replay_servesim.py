"""Both drivers over one spec: the wall-clock driver against serve-sim, the virtual one via `--sim`.

One serve-sim (in-process, on a free loopback port) serves the module, behind a middleware that keeps
each request body by its `X-Request-Id`, so the test sees exactly what went over the wire.
"""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from flatshare.replay.command import replay_command
from flatshare.replay.endpoints import Endpoint, sticky_index
from flatshare.replay.ledger import Ledger
from flatshare.replay.virtual import sticky_route
from flatshare.replay.wallclock import INTERRUPTED, run_wallclock
from flatshare.runfiles.samples import read_samples
from flatshare.serve.server import build_sim_app
from flatshare.sim.config import EngineConfig
from flatshare.sim.engine import SimEngine
from flatshare.sim.options import EngineOptions
from flatshare.sim.profile import load_profile
from flatshare.sim.requests import SimRequest
from flatshare.workloads.spec import parse_spec
from kit.net import ThreadServer
from kit.replay import Capture, checked_records, session, workload

pytestmark = pytest.mark.vllm

SPEC = "voice-agents:callers=3,agents=2,duration=12,turns=2,agent_stagger=1"
SEED, MODEL_LEN, VOCAB = 4, 1024, 512


def _sim_app() -> Any:
    return build_sim_app(EngineConfig(max_model_len=MODEL_LEN, kv_tokens=8192), load_profile())


@pytest.fixture(scope="module")
def server() -> Iterator[tuple[str, Capture]]:
    capture = Capture(_sim_app())
    with ThreadServer(capture) as background:
        yield background.url, capture


@pytest.fixture(scope="module")
def both_runs(
    server: tuple[str, Capture], tmp_path_factory: pytest.TempPathFactory
) -> tuple[Path, Path, dict[str, Any]]:
    url, capture = server
    wall, virtual = tmp_path_factory.mktemp("wall"), tmp_path_factory.mktemp("virtual")
    common: dict[str, Any] = {"seed": SEED, "max_model_len": MODEL_LEN, "vocab_size": VOCAB}
    replay_command(SPEC, wall, endpoints=[url], show_progress=False, **common)
    submitted: dict[str, SimRequest] = {}
    original = SimEngine.submit

    def submit(engine: SimEngine, request: SimRequest) -> None:
        submitted[request.id] = request
        original(engine, request)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(SimEngine, "submit", submit)
        replay_command(
            SPEC, virtual, sim=True, engine=EngineOptions(kv_tokens=8192), show_progress=False, **common
        )
    sent = {rid: (tuple(b["prompt"]), b["max_tokens"], b["priority"]) for rid, b in capture.bodies.items()}
    simulated = {rid: (r.prompt_token_ids, r.max_tokens, r.priority) for rid, r in submitted.items()}
    return wall, virtual, {"sent": sent, "simulated": simulated}


def test_the_same_spec_and_seed_give_identical_requests_in_both_drivers(
    both_runs: tuple[Path, Path, dict[str, Any]],
) -> None:
    wall, virtual, requests = both_runs
    expected = parse_spec(SPEC, SEED, max_model_len=MODEL_LEN, vocab_size=VOCAB)
    assert requests["sent"] == requests["simulated"]
    assert set(requests["sent"]) == {r.id for r in expected.requests()}
    key = ("id", "session_id", "cls", "priority", "prompt_tokens", "max_tokens", "first_sentence_tokens")
    wall_rows, virtual_rows = (
        checked_records(wall / "requests.jsonl"),
        checked_records(virtual / "requests.jsonl"),
    )
    assert sorted(tuple(r[k] for k in key) for r in wall_rows) == sorted(
        tuple(r[k] for k in key) for r in virtual_rows
    )


def test_both_runs_record_every_token_and_sample_the_engine(both_runs: tuple[Path, Path, Any]) -> None:
    for folder in both_runs[:2]:
        rows = checked_records(folder / "requests.jsonl")
        assert all(r["status"] == "ok" and r["output_tokens"] == r["max_tokens"] for r in rows)
        voice = [r for r in rows if r["cls"] == "voice"]
        assert voice and all(r["first_sentence_s"] is not None for r in voice)
        samples = read_samples(folder / "samples.jsonl")
        assert samples and max(s.kv_usage for _, s in samples) > 0
        run = json.loads((folder / "run.json").read_text())
        assert (run["spec"], run["seed"], run["max_model_len"], run["statuses"]) == (
            SPEC,
            SEED,
            MODEL_LEN,
            {"ok": len(rows)},
        )
    wall = json.loads((both_runs[0] / "run.json").read_text())
    virtual = json.loads((both_runs[1] / "run.json").read_text())
    assert wall["driver"] == "wallclock" and wall["endpoints"][0]["model"] == "sim"
    assert virtual["driver"] == "virtual" and virtual["engine"]["kv_tokens"] == 8192


def test_sticky_index_is_the_virtual_drivers_rule() -> None:
    engines = [object()] * 3
    for request in parse_spec("agents:n=12,duration=60", 0, max_model_len=4096).requests():
        assert sticky_index(request.session_id, 3) == sticky_route(request, engines)  # type: ignore[arg-type]


def test_a_server_stopped_mid_run_fails_its_requests_and_loses_none() -> None:
    work = workload(*(session(f"s{i}", 3, max_tokens=400, prompt=50) for i in range(3)))

    async def main(background: ThreadServer) -> Ledger:
        endpoint = Endpoint(background.url, "sim")
        ledger = Ledger()
        run = asyncio.create_task(run_wallclock(work, [endpoint], ledger))
        await asyncio.sleep(1.0)
        await asyncio.to_thread(background.stop)
        await asyncio.wait_for(run, timeout=30)
        return ledger

    background = ThreadServer(_sim_app())
    with background:
        ledger = asyncio.run(main(background))
    records = ledger.sorted_records()
    assert {r.id for r in records} == {r.id for r in work.requests()}
    assert all(r.status == "failed" for r in records)
    cut = [r for r in records if r.token_times_s]
    assert len(cut) == 3 and all(len(r.token_times_s) < 400 for r in cut)  # the first of each session
    assert all("ConnectError" in (r.error or "") for r in records if not r.token_times_s)


def test_ctrl_c_leaves_a_valid_partial_record_file(server: tuple[str, Capture], tmp_path: Path) -> None:
    url, capture = server
    spec = "agents:n=3,duration=60,agent_stagger=0.3"
    code = (
        "import sys\nfrom pathlib import Path\nfrom flatshare.replay.command import replay_command\n"
        f"s = replay_command({spec!r}, Path({str(tmp_path)!r}), endpoints=[{url!r}], max_model_len=1024,"
        " vocab_size=512, show_progress=False)\n"
        "print(s.line())\nsys.exit(130 if s.interrupted else 0)\n"
    )
    before = len(capture.arrived)
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while len(capture.arrived) - before < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.3)
        child.send_signal(signal.SIGINT)
        output, _ = child.communicate(timeout=120)  # generous: this machine can stall a process for seconds
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert child.returncode == 130, output.decode()
    rows = checked_records(tmp_path / "requests.jsonl")
    sent = capture.arrived[before:]
    assert sorted(r["id"] for r in rows) == sorted(sent)  # every request sent, and only those
    interrupted = [r for r in rows if r["error"] == INTERRUPTED]
    assert interrupted and all(r["status"] == "failed" for r in interrupted)
    assert any(r["output_tokens"] > 0 for r in interrupted)
    run = json.loads((tmp_path / "run.json").read_text())
    assert run["interrupted"] is True and run["requests"] == len(rows)


def test_sim_spreads_sessions_over_engines_by_the_sticky_rule(tmp_path: Path) -> None:
    spec = "agents:n=6,duration=30,agent_stagger=1"
    replay_command(spec, tmp_path, sim=True, sim_engines=2, max_model_len=4096, show_progress=False)
    rows = checked_records(tmp_path / "requests.jsonl")
    assert {r["engine"] for r in rows} == {"sim0", "sim1"}
    assert all(r["engine"] == f"sim{sticky_index(r['session_id'], 2)}" for r in rows)
    assert {engine for engine, _ in read_samples(tmp_path / "samples.jsonl")} == {"sim0", "sim1"}
    assert json.loads((tmp_path / "run.json").read_text())["engines"] == 2
