"""The calibration fit: features price work exactly as the simulator does, the fit recovers known
coefficients from probes made with them, and the probe layouts follow vLLM's chunking."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import numpy as np
import pytest

from flatshare.fidelity.calibrate import CalibrationPlan
from flatshare.fidelity.fit import COEFFICIENTS, Probe, fit_probes, predict, step_features
from flatshare.fidelity.probes import ServerInfo, histogram, histogram_buckets, info_labels, metric
from flatshare.fidelity.profile_file import build_profile, kv_bytes_per_token, write_profile
from flatshare.fidelity.work import Step, beside_steps, decode_step, prefill_steps
from flatshare.sim.profile import ScheduledWork, StepTimeProfile, load_profile

TRUE = StepTimeProfile(
    name="truth",
    step_fixed_s=0.004,
    prefill_token_s=3e-5,
    decode_token_s=2e-4,
    prefill_attn_pair_s=2e-9,
    decode_ctx_token_s=1e-7,
    kv_bytes_per_token=256,
    cpu_load_bytes_per_s=1e10,
    default_kv_tokens=2048,
)
LATENCY = 0.006


def _probes(profile: StepTimeProfile, noise: float = 0.0, seed: int = 0) -> list[Probe]:
    """Probes of the calibration's shapes whose 'measurements' the given profile made (client-timed
    ones with LATENCY added; decode probes are timed by the server's step timestamps, without it)."""
    rng = random.Random(seed)
    layouts: list[tuple[str, str, list[Step], list[float] | None, bool]] = [
        (f"prefill {n}", "prefill", prefill_steps([n], 512), None, True) for n in (32, 256, 512, 1000)
    ]
    for batch, context in ((1, 64), (1, 900), (4, 64), (4, 300), (8, 64), (8, 110)):
        layouts.append(
            (f"decode {batch}x{context}", "decode", [decode_step(batch, context + 48)], [1.0], False)
        )
    for n in (512, 700):
        steps, weights = beside_steps(n, 4, 72, 512)
        layouts.append((f"beside {n}", "prefill+decode", steps, weights, True))
    probes = []
    for name, kind, layout, given, client in layouts:
        w = tuple(given) if given is not None else (1.0,) * len(layout)
        true = predict(profile, Probe(name, kind, tuple(layout), w, (1.0,))) + (LATENCY if client else 0.0)
        samples = tuple(true * (1 + rng.uniform(-noise, noise)) for _ in range(3))
        probes.append(Probe(name, kind, tuple(layout), w, samples, client_timed=client))
    return probes


def test_features_price_a_step_exactly_as_the_profile_does() -> None:
    work = [ScheduledWork(300, 200, False), ScheduledWork(1, 900, True), ScheduledWork(1, 40, True)]
    coefficients = np.array([getattr(TRUE, name) for name in COEFFICIENTS])
    assert float(step_features(work) @ coefficients) == pytest.approx(TRUE.step_time(work), rel=1e-12)


def test_the_fit_recovers_known_coefficients_and_the_request_latency() -> None:
    fit = fit_probes(_probes(TRUE))
    for name in COEFFICIENTS:
        assert fit.coefficients[name] == pytest.approx(getattr(TRUE, name), rel=1e-3), name
    assert fit.request_latency_s == pytest.approx(LATENCY, rel=1e-3)
    assert fit.max_abs_rel_error < 1e-6


def test_with_noise_the_fit_stays_close_and_reports_the_residuals() -> None:
    fit = fit_probes(_probes(TRUE, noise=0.05, seed=3))
    assert fit.coefficients["step_fixed_s"] == pytest.approx(TRUE.step_fixed_s, rel=0.25)
    assert fit.coefficients["decode_token_s"] == pytest.approx(TRUE.decode_token_s, rel=0.25)
    assert 0 < fit.median_abs_rel_error < 0.06
    assert all(r["samples_s"] and "predicted_steps_s" in r for r in fit.residuals)


def test_probes_of_another_engine_move_the_fit_and_the_old_profile_misses_them() -> None:
    """Probes made by an engine with 10x the per-step cost: the fit follows them, and the old profile's
    predictions miss them by far (what the residuals of a stale profile would show)."""
    slow = StepTimeProfile(**{**TRUE.to_dict(), "name": "slow", "step_fixed_s": 0.04})
    fit = fit_probes(_probes(slow))
    assert fit.coefficients["step_fixed_s"] == pytest.approx(0.04, rel=1e-3)
    stale = [predict(TRUE, p) + LATENCY for p in _probes(slow)]
    errors = [abs(s / p.measured_s - 1) for s, p in zip(stale, _probes(slow), strict=True)]
    assert max(errors) > 0.5


def test_prefill_is_chunked_by_the_budget_beside_running_decodes() -> None:
    steps = prefill_steps([1000], 512, decode_step(4, 70))
    assert [sum(w.tokens for w in s if not w.is_decode) for s in steps] == [508, 492]
    assert [s[-1].context for s in steps] == [0, 508]
    assert all(sum(w.is_decode for w in s) == 4 for s in steps)
    steps = prefill_steps([300] * 4, 512)
    assert [sum(w.tokens for w in s) for s in steps] == [512, 512, 176]  # packed in arrival order
    steps, weights = beside_steps(512, 4, 72, 512)
    assert weights[0] == 0.5 and len(steps) == 3  # the running step, then 508 + 4 tokens


def test_profile_file_round_trips_and_says_where_it_came_from(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(
        json.dumps({"num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 1,
                    "head_dim": 32, "hidden_size": 64, "torch_dtype": "bfloat16"})
    )  # fmt: skip
    assert kv_bytes_per_token(str(tmp_path)) == (256, pytest.approx(kv_bytes_per_token(str(tmp_path))[1]))  # type: ignore[index]
    info = ServerInfo("http://127.0.0.1:1", "tiny", str(tmp_path), 1024, 64, 32, "0.32.0", {})
    kv = {"ok": True}
    profile = build_profile(
        "cal",
        fit_probes(_probes(TRUE)),
        info,
        CalibrationPlan(),
        kv,
        "flatshare calibrate-engine ...",
        ((1.0,), (2.0,)),
    )
    write_profile(profile, tmp_path / "cal.json")
    loaded = load_profile(str(tmp_path / "cal.json"))
    assert loaded.default_kv_tokens == 64 * 32 and loaded.kv_bytes_per_token == 256
    assert loaded.fit is not None and loaded.fit["kv_check"] == kv and len(loaded.fit["residuals"]) == 12
    assert any("Measured" in s and "calibrate-engine" in s for s in loaded.sources)
    assert loaded.step_fixed_s == pytest.approx(TRUE.step_fixed_s, rel=1e-3)
    assert loaded.api_latency_s == pytest.approx(LATENCY, rel=1e-2)


def test_metrics_text_parsing() -> None:
    text = (
        'vllm:cache_config_info{block_size="32",num_gpu_blocks="64",engine="0"} 1.0\n'
        'vllm:num_preemptions_total{engine="0",model_name="tiny"} 3.0\n'
        'vllm:inter_token_latency_seconds_sum{engine="0"} 1.5\n'
        'vllm:inter_token_latency_seconds_count{engine="0"} 600.0\n'
    )
    assert info_labels(text, "vllm:cache_config_info") == {
        "block_size": "32",
        "num_gpu_blocks": "64",
        "engine": "0",
    }
    assert metric(text, "vllm:num_preemptions_total") == 3.0 and metric(text, "vllm:nothing") is None
    assert histogram(text, "vllm:inter_token_latency_seconds") == (1.5, 600.0)
    buckets = (
        'vllm:request_queue_time_seconds_bucket{engine="0",le="2.0",model_name="tiny"} 2.0\n'
        'vllm:request_queue_time_seconds_bucket{engine="0",le="5.0",model_name="tiny"} 3.0\n'
        'vllm:request_queue_time_seconds_bucket{engine="0",le="+Inf",model_name="tiny"} 4.0\n'
    )
    assert histogram_buckets(buckets, "vllm:request_queue_time_seconds") == {
        2.0: 2.0,
        5.0: 3.0,
        math.inf: 4.0,
    }
    assert histogram_buckets(text, "vllm:request_queue_time_seconds") == {}


def test_the_shipped_tiny_profile_was_measured_and_records_its_fit() -> None:
    profile = load_profile("vllm-cpu-tiny")
    assert profile.fit is not None and profile.fit["kv_check"]["ok"]
    assert len(profile.fit["residuals"]) >= 8
    # The fitted API-server pass is applied by the simulator, not only recorded.
    assert profile.api_latency_s > 0
    assert profile.api_latency_s == pytest.approx(profile.fit["request_latency_s"], rel=1e-3)
    assert any(s.startswith("Measured") for s in profile.sources)
    assert (
        profile.default_kv_tokens
        == profile.fit["server"]["num_gpu_blocks"] * profile.fit["server"]["block_size"]
    )
