"""The admission experiment against a running gateway (`--endpoint`): refusals first (no engines needed),
then end to end over two serve-sim processes behind a real gateway, all on 127.0.0.1."""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Route

from flatshare.admission.command import (
    EndpointOptions,
    Finished,
    experiment_admission_endpoint,
    synthetic_for_endpoint,
)
from flatshare.admission.plan import SAGE, SyntheticPlan, endpoint_thresholds
from flatshare.errors import InputError
from flatshare.gateway.app import build_gateway
from flatshare.gateway.config import BackendConfig, GatewayConfig, PollConfig, TokenConfig
from flatshare.runfiles.records import read_records
from kit.net import ThreadServer, serve_sim_processes

TOKEN = "admission-test-token-0123"
POLL = PollConfig(interval_s=0.05, timeout_s=0.3, stale_after_s=0.5, unhealthy_after_failures=2)


def _config(urls: list[str], **changes: Any) -> GatewayConfig:
    backends = tuple(BackendConfig(url, f"b{i}") for i, url in enumerate(urls))
    settings: dict[str, Any] = {
        "poll": POLL,
        "tokens": TokenConfig(source="estimate"),
        "policy": "round-robin",
    }
    return GatewayConfig(backends=backends, **(settings | changes))


@contextmanager
def gateway(urls: list[str], **changes: Any) -> Iterator[str]:
    with ThreadServer(build_gateway(_config(urls, **changes)).app) as server:
        yield server.url


NOWHERE = ["http://127.0.0.1:9", "http://127.0.0.1:11"]  # nothing listens: backends down, gateway up


def _run(url: str, out: Path, token: str = TOKEN, **options: Any) -> Finished:
    return experiment_admission_endpoint(out, url, EndpointOptions(token, **options), seeds=1)


def test_a_url_that_is_no_gateway_is_refused(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"--endpoint http://127.0.0.1:9: cannot reach it"):
        _run("http://127.0.0.1:9", tmp_path)
    plain = Starlette(routes=[Route("/v1/models", lambda r: JSONResponse({"data": [{"id": "m"}]}))])
    with (
        ThreadServer(plain) as server,
        pytest.raises(InputError, match=r"GET /gateway/backends answered 404; is it a flatshare gateway"),
    ):
        _run(server.url, tmp_path)
    assert not (tmp_path / "runs").exists()


def test_a_missing_or_refused_token_is_refused(tmp_path: Path) -> None:
    with gateway(NOWHERE, admin_token=TOKEN) as url:
        with pytest.raises(InputError, match="give the gateway's admin token"):
            _run(url, tmp_path, token="")
        with pytest.raises(InputError, match=r"refused the admin token \(401\)"):
            _run(url, tmp_path, token="not-the-token-at-all")
    with gateway(NOWHERE) as url, pytest.raises(InputError, match="cannot be switched \\(no admin_token\\)"):
        _run(url, tmp_path)


def test_no_model_to_send_is_refused(tmp_path: Path) -> None:
    with gateway(NOWHERE, admin_token=TOKEN) as url, pytest.raises(InputError, match="lists no model"):
        _run(url, tmp_path)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"short_prompt": "300"}, "--short-prompt: expected LOW,HIGH"),
        ({"short_prompt": "a,b"}, "--short-prompt: expected LOW,HIGH"),
        ({"short_prompt": "400,100"}, "--short-prompt: expected 1 <= LOW <= HIGH"),
        ({"long_tokens": 600, "short_prompt": "100,300"}, r"must stay below the input threshold .* = 300"),
        ({"short_max_tokens": 300}, "short_max_tokens must lie in"),
        ({"long_tokens": 19_990}, "exceeds the model's max_model_len 20000"),
    ],
)
def test_sizes_are_checked(changes: dict[str, Any], message: str) -> None:
    with pytest.raises(InputError, match=message):
        synthetic_for_endpoint(SyntheticPlan(), EndpointOptions(**changes), 2, 20_000)


def test_endpoint_sizes_fit_the_gateway() -> None:
    fits = synthetic_for_endpoint(
        SyntheticPlan(), EndpointOptions(long_tokens=12_000, short_prompt="50,80"), 3, None
    )
    assert (fits.engines, fits.long_tokens, fits.short_prompt) == (3, 12_000, (50, 80))
    assert (
        endpoint_thresholds(12_000).input_tokens == 6000 and endpoint_thresholds(50_000).input_tokens == 8192
    )


# -- end to end ----------------------------------------------------------------------------------------
@contextmanager
def serve_sims(count: int, *args: str) -> Iterator[list[str]]:
    """`count` `flatshare serve-sim` processes on free loopback ports; yields their URLs."""
    with serve_sim_processes(count, *args) as procs:
        yield [sim.url for sim in procs]


SIZES: dict[str, Any] = {
    "long_tokens": 12_000,
    "long_max_tokens": 16,
    "short_prompt": "100,300",
    "short_max_tokens": 32,
    "long_first": False,
}


@pytest.mark.server
@pytest.mark.timeout(300)
def test_endpoint_mode_end_to_end(tmp_path: Path) -> None:
    sim_args = ("--policy", "fcfs", "--max-num-batched-tokens", "512", "--max-model-len", "16384")
    with serve_sims(2, *sim_args) as sims, gateway(sims, admin_token=TOKEN) as url:
        before = httpx.get(f"{url}/gateway/routing").json()
        start = time.monotonic()
        summary = experiment_admission_endpoint(
            tmp_path, url, EndpointOptions(TOKEN, **SIZES), seeds=2
        ).summary
        wall_s = time.monotonic() - start
        after = httpx.get(f"{url}/gateway/routing").json()
    print(f"endpoint experiment: {wall_s:.1f} s")
    assert after == before  # the gateway's routing is restored
    assert (summary.mode, summary.endpoint, summary.backends) == ("endpoint", url, ("b0", "b1"))
    written = json.loads((tmp_path / "summary.json").read_text())
    assert written["mode"] == "endpoint" and written == json.loads(json.dumps(summary.to_json()))
    conditions = summary.workloads["synthetic"].conditions
    assert sorted(conditions) == ["A-fcfs-one-engine", "B-controller", "alone"]
    a, b = conditions["A-fcfs-one-engine"], conditions["B-controller"]
    assert a.n_runs == b.n_runs == 2 and a.n_short == b.n_short == 20
    assert a.failed == b.failed == 0
    print(f"short p95 TTFT: A {a.short_ttft_p95_s} s, B {b.short_ttft_p95_s} s")
    assert a.routed_away_frac is None and b.routed_away_frac is not None and b.routed_away_frac > 0
    assert a.short_ttft_p95_s is not None and b.short_ttft_p95_s is not None
    assert b.short_ttft_p95_s < a.short_ttft_p95_s
    moved = 0
    for seed in (0, 1):
        for key in ("A-fcfs-one-engine", "B-controller"):
            folder = tmp_path / "runs" / "synthetic" / key / f"s{seed}"
            records = {r.id: r for r in read_records(folder / "requests.jsonl")}
            decisions = [json.loads(x) for x in (folder / "decisions.jsonl").read_text().splitlines()]
            samples = [json.loads(x) for x in (folder / "samples.jsonl").read_text().splitlines()]
            assert len(decisions) == 11 and {s["engine"] for s in samples} == {"b0", "b1"}
            long = next(d for d in decisions if d["request_id"] == "long/0")
            assert records["long/0"].engine == long["backend"]
            if key == "A-fcfs-one-engine":
                assert {r.engine for r in records.values()} == {"b0"}
            elif long["reason"] == "kv_pressure":
                assert (long["preferred"], long["backend"]) == ("b0", "b1")
                moved += 1
    assert moved >= 1
    assert summary.skipped is not None
    skipped = [c.key for c in summary.skipped.conditions]
    assert (
        skipped == ["make-room", "controller+make-room", "sage", "controller+sage"] and summary.skipped.traces
    )
    report = (tmp_path / "report.md").read_text()
    assert "against a running gateway" in report and "MakeRoomScheduler" in report
    assert "Skipped condition `make-room`" in report and "--trace-seconds" in report
    assert "no occupancy data" in report and summary.attribution_note
    assert (tmp_path / "synthetic.png").is_file()


def test_salted_prompts_are_fresh_and_within_the_models_vocabulary() -> None:
    """Every run's prompts differ from every other run's, and their ids fit the backends' model (a tiny
    model of 512 tokens refuses larger ids with HTTP 400)."""
    from flatshare.admission.endpointworkloads import salted
    from flatshare.admission.synthetic import synthetic_workload

    workload = synthetic_workload(SyntheticPlan(long_tokens=2000, shorts=3), seed=0)
    first, second = salted(workload, "run-a", 512), salted(workload, "run-b", 512)
    for a, b in zip(first.requests(), second.requests(), strict=True):
        assert a.vocab_size == b.vocab_size == 512
        ids_a, ids_b = a.prompt_token_ids, b.prompt_token_ids
        assert max(ids_a) < 512 and ids_a != ids_b and len(ids_a) == len(ids_b)


def test_a_vocabulary_too_small_is_refused(tmp_path: Path) -> None:
    with gateway(NOWHERE, admin_token=TOKEN) as url, pytest.raises(InputError, match="vocab"):
        _run(url, tmp_path, model="m", vocab_size=4)


def test_each_decision_sees_the_last_reading_of_each_backend_before_it() -> None:
    """Decisions in send order, numbered, each with every backend as its last sample at or before the
    send time (a backend not read yet is absent); requests without routing headers make none."""
    from flatshare.admission.gatewaydecisions import decisions_from
    from flatshare.runfiles.records import ReplayRecord

    def record(rid: str, send_s: float) -> ReplayRecord:
        return ReplayRecord(rid, rid, "short", 1, 100, 8, "b0", send_s)

    def sample(engine: str, t: float, kv: float) -> dict[str, Any]:
        return {"engine": engine, "t": t, "kv_usage": kv, "running": 1, "waiting": 0}

    samples = [
        sample("b1", 0.25, 0.9),
        sample("b0", 0.0, 0.1),
        sample("b0", 0.2, 0.2),
        sample("b0", 0.5, 0.5),
    ]
    records = [record("late", 0.6), record("first", 0.1), record("mid", 0.3), record("unrouted", 0.4)]
    heads = {r: ("b1", "kv_pressure", "b0") for r in ("late", "first", "mid")}
    decisions = decisions_from(records, heads, samples)
    assert [(d.request_id, d.sequence) for d in decisions] == [("first", 0), ("mid", 1), ("late", 2)]
    seen = [{b["name"]: b["kv_usage"] for b in d.backends} for d in decisions]
    assert seen == [{"b0": 0.1}, {"b0": 0.2, "b1": 0.9}, {"b0": 0.5, "b1": 0.9}]
    assert (decisions[0].backend, decisions[0].preferred, decisions[0].reason) == ("b1", "b0", "kv_pressure")


@pytest.mark.server
@pytest.mark.timeout(300)
def test_sage_conditions_run_through_a_second_gateway_over_sage_backends(tmp_path: Path) -> None:
    """`--sage-endpoint`: the sage and controller+sage conditions run through a gateway whose backends
    run sage, in the same seeds as A and B, so the report pairs them; make-room's stay skipped."""
    sim_args = ("--policy", "fcfs", "--max-num-batched-tokens", "512", "--max-model-len", "16384")
    sage_args = (*sim_args, "--scheduler", "sage", "--additional-config", json.dumps({"sage": SAGE}))
    with (
        serve_sims(2, *sim_args) as sims,
        serve_sims(2, *sage_args) as sage_sims,
        gateway(sims, admin_token=TOKEN) as url,
        gateway(sage_sims, admin_token=TOKEN) as sage_url,
    ):
        sage_before = httpx.get(f"{sage_url}/gateway/routing").json()
        options = EndpointOptions(TOKEN, sage_endpoint=sage_url, **SIZES)
        summary = experiment_admission_endpoint(tmp_path, url, options, seeds=2).summary
        assert httpx.get(f"{sage_url}/gateway/routing").json() == sage_before  # restored too
    conditions = summary.workloads["synthetic"].conditions
    assert sorted(conditions) == ["A-fcfs-one-engine", "B-controller", "alone", "controller+sage", "sage"]
    for key in ("sage", "controller+sage"):
        cell = conditions[key]
        assert cell.n_runs == 2 and cell.n_short == 20 and cell.failed == 0
        assert (
            cell.vs_baseline.p_value is not None and cell.ttlt_vs_baseline.p_value is not None
        )  # paired with A
        for seed in (0, 1):
            folder = tmp_path / "runs" / "synthetic" / key / f"s{seed}"
            facts = json.loads((folder / "run.json").read_text())
            assert facts["endpoint"] == sage_url and facts["condition"]["sage"] is True
            assert {r.engine for r in read_records(folder / "requests.jsonl")} <= {"b0", "b1"}
    assert conditions["sage"].routed_away_frac is None
    assert conditions["controller+sage"].routed_away_frac is not None
    assert summary.skipped is not None
    assert [c.key for c in summary.skipped.conditions] == ["make-room", "controller+make-room"]
    report = (tmp_path / "report.md").read_text()
    assert f"second gateway, `{sage_url}`" in report


def test_a_sage_gateway_must_be_another_with_as_many_backends() -> None:
    from flatshare.admission.endpointplan import EndpointPlan
    from flatshare.admission.gatewayclient import GatewayInfo

    main = GatewayInfo("http://127.0.0.1:1", ("b0", "b1"), {}, "m", None)
    plan = EndpointPlan(
        main, SyntheticPlan(seeds=1), sage_gateway=dataclasses.replace(main, url="http://127.0.0.1:2")
    )
    assert [c.key for c in plan.conditions] == [
        "A-fcfs-one-engine",
        "B-controller",
        "sage",
        "controller+sage",
    ]
    assert [c.key for c in EndpointPlan(main, SyntheticPlan(seeds=1)).conditions] == [
        "A-fcfs-one-engine",
        "B-controller",
    ]
    with pytest.raises(ValueError, match="another gateway"):
        EndpointPlan(main, SyntheticPlan(), sage_gateway=main)
    with pytest.raises(ValueError, match="same number"):
        EndpointPlan(
            main, SyntheticPlan(), sage_gateway=GatewayInfo("http://127.0.0.1:2", ("s0",), {}, "m", None)
        )
