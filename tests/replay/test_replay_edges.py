"""The virtual-time driver's one loop: no gate is the same run as a gate that sends every request the
moment it arrives (`flatshare.replay.edges`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import pytest

from flatshare.policy.classes import Classes
from flatshare.policy.gates.core import Decisions, Gate, Send
from flatshare.policy.load import BackendLoad
from flatshare.replay.virtual import VirtualRun, run_virtual
from flatshare.sim.config import EngineConfig
from flatshare.sim.engine import SimEngine
from flatshare.sim.profile import load_profile
from flatshare.workloads.spec import parse_spec

pytestmark = pytest.mark.vllm


class _SendAll(Gate):
    """A gate that holds nothing: every held request is sent at the next poll, as it is."""

    name = "send-all"

    def _decide(self, now: float, loads: Mapping[str, BackendLoad]) -> Decisions:
        return Decisions(send=tuple(Send(t.request.id, None) for t in self.held()))


def _run(gate: Gate | None) -> VirtualRun:
    workload = parse_spec("voice-agents:callers=2,agents=3,duration=40", seed=2, max_model_len=32768)
    engines = [SimEngine(EngineConfig(kv_tokens=40960), load_profile()) for _ in range(2)]
    return run_virtual(workload, engines, until_s=40, gate=gate)


def _without_gateway_wait(record: Any) -> Any:
    waits = {k: v for k, v in (record.wait_s or {}).items() if k != "gateway"}
    return dataclasses.replace(record, wait_s=waits or record.wait_s)


def test_no_gate_runs_as_a_gate_that_sends_everything_at_once() -> None:
    direct, gated = _run(None), _run(_SendAll(Classes()))
    assert len(direct.records) > 8 and {r.cls for r in direct.records} == {"voice", "agent"}
    assert [r.to_json() for r in direct.records] == [
        _without_gateway_wait(r).to_json() for r in gated.records
    ]
    assert all(r.wait_s is not None and r.wait_s["gateway"] == 0.0 for r in gated.records)
    assert direct.totals() == gated.totals() and direct.samples == gated.samples
    assert direct.gate_counters == {} and gated.gate_counters["sent"] == len(gated.records)
