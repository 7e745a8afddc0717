"""The simulated cluster asks the gateway's own policies, with fresh snapshots of every engine."""

from __future__ import annotations

from pathlib import Path

import pytest
from admissionkit import request, run_saved, workload

from flatshare.admission.plan import SYNTHETIC_THRESHOLDS, SyntheticPlan
from flatshare.admission.synthetic import synthetic_workload
from flatshare.policy.policies import make_policy
from flatshare.policy.routing import Thresholds

pytestmark = pytest.mark.vllm


def test_first_keeps_everything_on_one_engine_and_logs_each_decision(tmp_path: Path) -> None:
    w = workload(*(request(f"short/{i}", 0.01 * i, 200, 16) for i in range(4)))
    run = run_saved(tmp_path, w, engines=2)
    assert {r.engine for r in run.records} == {"sim0"}
    assert [d.sequence for d in run.decisions] == [0, 1, 2, 3]
    assert all(d.reason == "first" and not d.moved for d in run.decisions)


def test_snapshots_are_fresh_and_count_unadmitted_requests_as_waiting(tmp_path: Path) -> None:
    w = workload(
        request("short/0", 0.0, 3000, 64), request("short/1", 0.0, 300, 8), request("short/2", 0.2, 300, 8)
    )
    run = run_saved(tmp_path, w, engines=2)
    first, second, third = run.decisions
    assert first.backends[0]["kv_usage"] == 0.0 and first.backends[0]["waiting"] == 0
    assert second.backends[0]["waiting"] == 1  # routed at the same instant, not yet admitted
    assert third.backends[0]["kv_usage"] > 0.0  # short/0 holds KV by 0.2 s
    assert third.backends[1]["kv_usage"] == 0.0


def test_threshold_moves_a_long_request_off_a_busy_engine(tmp_path: Path) -> None:
    w = workload(request("short/0", 0.0, 300, 64), request("long/0", 0.05, 20_000, 4, "long"))
    policy = make_policy("threshold", Thresholds(kv_usage=0.0, input_tokens=8192), prefer="first")
    run = run_saved(tmp_path, w, engines=2, policy=policy)
    long = next(d for d in run.decisions if d.request_id == "long/0")
    assert (long.reason, long.preferred, long.backend) == ("kv_pressure", "sim0", "sim1")
    assert next(r for r in run.records if r.id == "long/0").engine == "sim1"


def test_the_synthetic_arrivals_let_the_rule_fire() -> None:
    plan = SyntheticPlan()
    for seed in range(10):
        w = synthetic_workload(plan, seed)
        requests = sorted(w.requests(), key=lambda r: r.arrival_s or 0.0)
        long_at = next(i for i, r in enumerate(requests) if r.cls == "long")
        assert long_at >= plan.long_after  # at least two shorts are already in flight
        assert requests[long_at].prompt_tokens == 50_000 > SYNTHETIC_THRESHOLDS.input_tokens
        assert all(r.max_tokens <= 256 for r in requests if r.cls == "short")
        first = synthetic_workload(plan, seed, long_first=True)
        assert next(iter(first.requests())).cls == "long"
