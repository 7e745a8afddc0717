"""Builders for admission tests: small open-loop workloads, a cluster run saved and read back."""

from __future__ import annotations

from pathlib import Path

from flatshare.admission.cluster import run_cluster
from flatshare.admission.plan import PROFILE, default_engine
from flatshare.admission.runs import SavedRun, load_run, save_run
from flatshare.policy.policies import Policy, make_policy
from flatshare.sim.profile import load_profile
from flatshare.workloads.model import Session, Workload, WorkloadRequest
from flatshare.workloads.tokens import unique_span


def request(rid: str, t: float, prompt: int, out: int, cls: str = "short") -> WorkloadRequest:
    return WorkloadRequest(
        id=rid,
        session_id=rid,
        cls=cls,
        priority=10 if cls == "long" else 1,
        prompt=(unique_span(f"test/{rid}", prompt),),
        max_tokens=out,
        pause_before_s=t,
        arrival_s=t,
    )


def workload(*requests: WorkloadRequest) -> Workload:
    ordered = sorted(requests, key=lambda r: (r.arrival_s or 0.0, r.id))
    return Workload("test", tuple(Session(r.id, r.cls, r.pause_before_s, (r,)) for r in ordered))


def run_saved(
    tmp: Path, w: Workload, engines: int = 1, policy: Policy | None = None, part: str = "synthetic"
) -> SavedRun:
    """Run `w` on fresh A100 engines, save it as an experiment run, and read it back from disk."""
    config = default_engine()
    cluster = run_cluster(w, config, load_profile(PROFILE), engines, policy or make_policy("first"))
    facts = {
        "workload": "test",
        "part": part,
        "engines": engines,
        "condition": {"key": "test", "routing_policy": "first", "prefer": "round-robin", "make_room": False},
        "seed": 0,
        "thresholds": None,
        "long_input_tokens": 8192,
        "replay_s": None,
        "eval_from_s": 0.0,
        "engine_config": config.to_json(),
        "profile": PROFILE,
    }
    folder = tmp / "run"
    save_run(folder, cluster, facts)
    return load_run(folder)
