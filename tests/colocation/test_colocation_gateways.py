"""The gateway a gateway-side baseline runs behind on real engines (`--engine vllm`): its settings are the
simulated condition's gate, its config file is one the gateway itself loads, its command line keeps the
admin token out, and a wall-clock replay through the real gateway (in-process here, over a fake vLLM
backend) tells its gate when callers speak and tools return, as the virtual-time driver does."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from pathlib import Path

import httpx
import pytest

from flatshare.colocation.experiment import BASELINE_CONDITIONS, BASELINE_SWEEP, MAIN_CONDITIONS
from flatshare.colocation.gateways import POLL, TOKEN_ENV, gate_counters, gateway_spec
from flatshare.gateway.app import build_gateway
from flatshare.gateway.configfile import load_config
from flatshare.policy.gates import make_settings
from flatshare.replay.endpoints import Endpoint
from flatshare.replay.gatewayevents import GatewayEvents
from flatshare.replay.ledger import Ledger
from flatshare.replay.wallclock import WallClockOptions, run_wallclock
from flatshare.workloads.model import Workload
from kit.fake_vllm import FakeState, fake_backend_app
from kit.net import ThreadServer
from kit.replay import session

TOKEN = "colocation-admin-token-0123"


def test_engine_side_conditions_have_no_gateway_and_gated_ones_the_simulated_gate() -> None:
    assert all(gateway_spec(c) is None for c in MAIN_CONDITIONS)
    gated = [c for c in BASELINE_CONDITIONS + BASELINE_SWEEP if c.gate is not None]
    assert {c.gate for c in gated} == {"agent-cap", "abort-resubmit", "flow-control", "leaseholder"}
    for condition in gated:
        spec = gateway_spec(condition)
        assert spec is not None and condition.gate is not None
        assert spec.settings["baseline"] == condition.gate
        assert make_settings(spec.settings["baseline"], spec.settings["baseline_settings"]) == make_settings(
            condition.gate, condition.gate_settings
        )
    broken = dataclasses.replace(gated[0], key="broken", gate_settings={"no_such_setting": 1})
    with pytest.raises(
        ValueError, match=f"broken: baseline {gated[0].gate}: unknown setting no_such_setting"
    ):
        gateway_spec(broken)


def test_the_written_config_is_one_the_gateway_loads_and_the_token_stays_off_the_command_line(
    tmp_path: Path,
) -> None:
    leaseholder = next(c for c in BASELINE_CONDITIONS if c.key == "leaseholder")
    spec = gateway_spec(leaseholder)
    assert spec is not None
    placed = spec.written(tmp_path, "http://127.0.0.1:8123")
    config = load_config(placed.config_path, {"backends": [{"url": placed.backend}]})
    assert config.baseline == "leaseholder"
    assert config.baseline_settings == dict(leaseholder.gate_settings or {})
    assert config.poll.interval_s == POLL["interval_s"] and config.tokens.source == "estimate"
    assert [b.url for b in config.backends] == ["http://127.0.0.1:8123"]
    command = placed.command(9000)
    assert command[command.index("--port") + 1] == "9000" and "--admin-token" not in command
    assert placed.admin_token not in " ".join(command) + json.dumps(dict(placed.settings))
    assert placed.environment()[TOKEN_ENV] == placed.admin_token == spec.admin_token
    assert len(placed.admin_token) >= 16  # the gateway's own minimum
    line = spec.shell_line()
    assert "--backend http://127.0.0.1:$PORT" in line and "--port $GATEWAY_PORT" in line
    assert '"baseline": "leaseholder"' in line and spec.admin_token not in line


def test_a_replay_through_the_real_gateway_tells_its_gate_when_callers_speak_and_tools_return(
    tmp_path: Path,
) -> None:
    leaseholder = next(c for c in BASELINE_CONDITIONS if c.key == "leaseholder")
    spec = gateway_spec(leaseholder)
    assert spec is not None
    backend = FakeState(model="colocation", tokens=4, token_delay_s=0.01)
    with ThreadServer(fake_backend_app(backend)) as engine:
        placed = spec.written(tmp_path, engine.url)
        overrides = {"backends": [{"url": engine.url}], "admin_token": TOKEN}
        gateway = build_gateway(load_config(placed.config_path, overrides))
        with ThreadServer(gateway.app) as front:
            voice = session(
                "call",
                3,
                pause_s=0.3,
                max_tokens=4,
                prompt=24,
                cls="voice",
                priority=0,
                speech_tokens_per_s=200.0,
                first_sentence=2,
            )
            agent = session("agent", 3, pause_s=0.05, max_tokens=4, prompt=24)
            ledger = Ledger()
            options = WallClockOptions(duration_s=20.0, grace_s=5.0, session_headers=True)
            asyncio.run(
                run_wallclock(
                    Workload("gated", (voice, agent)),
                    [Endpoint(front.url, "colocation")],
                    ledger,
                    options,
                    events=GatewayEvents(front.url, TOKEN),
                    sample_from=[Endpoint(engine.url, "colocation")],
                )
            )
            counters = gate_counters(httpx.get(f"{front.url}/metrics", timeout=5).text)
    assert all(r.status == "ok" for r in ledger.records.values()) and len(ledger.records) == 6
    assert (ledger.stats.events_sent, ledger.stats.event_errors) == (4, 0)
    assert counters["arrived"] == 6
    # two turns after the first: the caller spoke before each; two agent requests after a tool call
    assert counters["events_caller_speaking"] == 2 and counters["events_tool_returned"] == 2
    assert counters["leases"] == 2  # each lease on the session's backend: the session header reached the gate
    assert ledger.samples and {name for name, _ in ledger.samples} == {engine.url}


def test_a_gateway_that_cannot_start_is_a_server_error_quoting_its_log(tmp_path: Path) -> None:
    from flatshare.colocation.gateways import GatewaySpec
    from flatshare.testing.vllm_server import VllmServer, VllmServerError

    table = {"baseline": "agent-cap", "baseline_settings": {"no_such_setting": 1}}
    spec = GatewaySpec(table, startup_timeout_s=60.0).written(tmp_path, "http://127.0.0.1:9")
    server = VllmServer(spec, log_dir=tmp_path)
    with pytest.raises(VllmServerError) as failed:
        server.start()
    assert "gateway exited with code 2 while starting" in str(failed.value)
    assert "no_such_setting" in str(failed.value) and server.log_path.name.startswith("gateway-")
    assert not server.running()
