"""Issue 8: the simulator against a real vLLM CPU server (the tiny local model, scarce KV).

Two server starts, one after the other: vLLM's stock scheduler, then make-room. On each server the
test calibrates a profile (`calibrate-engine`, every probe 5 times), then replays a small
voice-plus-agents workload against the server twice (the real-vs-real noise) and once through the
simulator with that profile. Then the same comparison (`--real-from`, no server) with a wrong profile
must fail.

Asserted rows (`ENGINE_ROWS`), what the engine decides: vLLM's own mean inter-token and end-to-end
latency (its histograms, before any HTTP response) against the simulator's means, and the preemption
count. Each must be within max(FLOOR, K x real-vs-real), the bound of
`flatshare.fidelity.compare` with K = 3 (one noise sample can be small by chance) and FLOOR = 40% (on
two shared cores the engine's step time drifted by up to 38% between a calibration and a run minutes
later when one profile served both servers, docs/fidelity.md; calibrated on each server just before
its runs, these rows came within -13% to +10%); the preemption count also gets K x sqrt(n) / n
(Poisson). Reported, not
asserted: client-side TTFT and gaps, which the vLLM API server shapes on this machine (a reply's
tokens often arrive late and in one burst while other streams are busy; the simulator has no API
server), and the mean KV use (`/metrics` answers late during those bursts, so its samples favour
idle moments).

The check can fail: the same comparison with the stock server's own profile made 4 x slower (every
step-time coefficient) is out of bounds, its engine timing more than 3 x the floor off (asserted). A
profile from another engine (`llama3-8b-24gb`) is compared and reported, not asserted: how far it is
from the tiny model depends on how fast the machine running the test is (+309% to +1471% engine e2e on
the development machine; +105% on a CI machine whose real runs were 2-3 x slower, where the 3 x floor
margin then failed). The comparison with the simulator's KV cache halved is run and reported; whether
it leaves the bounds depends on the noise measured that time.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

import pytest

from flatshare.fidelity.command import FidelitySummary, calibrate_engine_command, fidelity_command
from flatshare.fidelity.compare import Row
from flatshare.fidelity.profile_file import write_profile
from flatshare.sim.profile import STEP_COEFFICIENTS, StepTimeProfile, load_profile
from flatshare.testing.vllm_server import VllmServer, VllmServerConfig

pytestmark = [pytest.mark.server, pytest.mark.vllm, pytest.mark.timeout(900)]

SPEC = "voice-agents:callers=3,agents=5,duration=25,turns=4,agent_stagger=1"
MODEL_LEN, BLOCKS, BUDGET, SEQS = 1024, 66, 512, 16  # 33 blocks still hold max_model_len
FLOOR, K = 0.4, 3.0
# Asserted: vLLM's own means and the preemption count. The agents' client-side e2e p50 was asserted too
# until a CI run where vLLM's API server stalled and delivered the agents' tokens in one late burst
# (real gap p50 0.0 ms, e2e p50 1.63 s against an engine mean of 0.54 s): it is reported with the other
# client-side rows.
TIMING_ROWS = {("engine", "itl_mean"), ("engine", "e2e_mean")}
ENGINE_ROWS = TIMING_ROWS | {("run", "preemptions")}


def _server(model: Path, make_room: bool) -> VllmServerConfig:
    extra: dict[str, object] = {}
    if make_room:
        extra = {
            "scheduler_cls": "flatshare.scheduler.MakeRoomScheduler",
            "additional_config": {"make_room": {"enabled": True}},
        }
    return VllmServerConfig(
        model=model,
        max_model_len=MODEL_LEN,
        num_gpu_blocks=BLOCKS,
        max_num_batched_tokens=BUDGET,
        max_num_seqs=SEQS,
        scheduling_policy="priority",
        startup_timeout_s=240.0,
        # On two cores vLLM's engine core and worker can starve its API server (make-room's server test
        # saw it in CI); a calibration probe then failed to connect within 10 s, twice in a row here.
        engine_niceness=10,
        **extra,  # type: ignore[arg-type]
    )


def _fidelity(endpoint: str, profile: Path, out: Path, scheduler: str, **kw: object) -> FidelitySummary:
    """`flatshare fidelity` with the test's engine settings and bounds (two real runs by default)."""
    return fidelity_command(
        endpoint, str(profile), SPEC, out, scheduler=scheduler, max_num_batched_tokens=BUDGET,
        max_num_seqs=SEQS, floor=FLOOR, k=K, **kw,  # type: ignore[arg-type]
    )  # fmt: skip


SLOWER = 4.0  # the wrong profile: this machine's own, every step-time coefficient x 4


def _slower(path: Path, factor: float) -> StepTimeProfile:
    """The profile at `path` with every step-time coefficient multiplied by `factor`."""
    profile = load_profile(str(path))
    scaled = {name: getattr(profile, name) * factor for name in STEP_COEFFICIENTS}
    return dataclasses.replace(profile, name=f"{profile.name}-{factor:g}x-slower", **scaled)


@pytest.fixture(scope="module")
def results(
    tiny_model: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, FidelitySummary]]:
    model = tiny_model
    logs, out = tmp_path_factory.mktemp("vllm-logs"), tmp_path_factory.mktemp("fidelity")
    found: dict[str, FidelitySummary] = {}
    for name, scheduler in (("stock", "vllm"), ("make-room", "make-room")):
        with VllmServer(_server(model, make_room=name == "make-room"), log_dir=logs) as server:
            # Calibrated on each server just before its runs: the engine's speed on two shared cores
            # drifts by tens of percent over minutes, and a profile is a statement about the machine now.
            profile = out / f"tiny-{name}.json"
            # The full probe set (~15 s): a --quick fit missed one probe by 90% in a CI run.
            print(calibrate_engine_command(server.url, profile).line())
            found[name] = _fidelity(server.url, profile, out / name, scheduler)
            print(found[name].line())
    stock, profile, halved = out / "stock", out / "tiny-stock.json", BLOCKS // 2
    found["halved-kv"] = _fidelity("", profile, out / "halved", "vllm", real_from=stock, kv_blocks=halved)
    print("halved KV:", found["halved-kv"].line())
    slower = out / f"tiny-stock-{SLOWER:g}x-slower.json"
    write_profile(_slower(profile, SLOWER), slower)
    found["slower-profile"] = _fidelity("", slower, out / "slower", "vllm", real_from=stock)
    print(f"profile {SLOWER:g} x slower:", found["slower-profile"].line())
    found["other-profile"] = _fidelity("", Path("llama3-8b-24gb"), out / "other", "vllm", real_from=stock)
    print("other engine's profile (reported):", found["other-profile"].line())
    yield found


def _rows(summary: FidelitySummary, keys: set[tuple[str, str]]) -> list[Row]:
    return [r for r in summary.result.rows if (r.cls, r.quantity) in keys]


@pytest.mark.parametrize("name", ["stock", "make-room"])
def test_both_real_runs_and_the_sim_served_every_request(
    results: dict[str, FidelitySummary], name: str
) -> None:
    result = results[name].result
    ids = {r.id for r in result.sim.records}
    assert len(ids) >= 10
    for run in [*result.real, result.sim]:
        assert {r.id for r in run.records} == ids, run.name
        assert all(r.status == "ok" for r in run.records), [r.error for r in run.records if r.error]
    assert len(result.real) == 2 and all(r.noise is not None for r in _rows(results[name], ENGINE_ROWS))


@pytest.mark.parametrize("name", ["stock", "make-room"])
def test_the_sim_is_within_the_noise_bounds_on_the_engine_rows(
    results: dict[str, FidelitySummary], name: str
) -> None:
    rows = _rows(results[name], ENGINE_ROWS)
    assert len(rows) == len(ENGINE_ROWS)
    bad = [
        f"{r.cls} {r.quantity}: {r.sim_error:+.0%} > {r.bound:.0%} (noise {r.noise})"
        for r in rows
        if not r.ok
    ]
    assert not bad, f"{bad}\n{(results[name].out / 'report.md').read_text()}"


def test_a_profile_for_a_slower_machine_is_far_out_of_bounds(results: dict[str, FidelitySummary]) -> None:
    """Out of bounds, and its timing error more than 3 x the floor whatever the noise of the moment.

    The margin was 3 x each row's bound until a CI run whose two real runs differed by 35% (engine
    e2e 2.04 s and 1.32 s): the bound grew to 105%. It was then 3 x the floor, against a profile from
    another engine (`llama3-8b-24gb`), until a CI run on a machine where the tiny model ran 2-3 x slower
    than here: that profile came within +105% (rejected, but under 3 x the floor). A fixed profile's
    distance from the real engine depends on the machine's speed; this one is calibrated on the machine
    and made 4 x slower, so its error does not."""
    slower = results["slower-profile"]
    assert not slower.result.verdict
    timing = _rows(slower, TIMING_ROWS)
    assert len(timing) == len(TIMING_ROWS)
    assert max(abs(r.sim_error or 0.0) for r in timing) > 3 * FLOOR, [r.to_json() for r in timing]


def test_a_halved_kv_cache_is_flagged_as_a_mismatch(results: dict[str, FidelitySummary]) -> None:
    """Reported, not asserted beyond the flag: whether its errors leave the bounds depends on the
    measured noise (caught in one run here: engine e2e +68% against a 38% bound; not in the next, whose
    load spike made the bounds 117-165%). The profile mismatch above is the assertion that can fail."""
    halved = results["halved-kv"]
    assert halved.result.meta["mismatches"] == [f"KV blocks {BLOCKS // 2} (server {BLOCKS})"]
    assert "Settings differ from the server's" in (halved.out / "report.md").read_text()


def test_the_reports_are_written(results: dict[str, FidelitySummary]) -> None:
    for summary in results.values():
        assert (summary.out / "fidelity.json").is_file() and (summary.out / "cdf.png").stat().st_size > 10_000
        assert "| voice | ttft_p50* |" in (summary.out / "report.md").read_text()
