"""sage's predictor calibration (`flatshare experiment sage-calibration`) on built requests and a trace."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from flatshare.admission.predictor import calibrate, randomized_pit
from flatshare.scheduler.sage_predict import LengthDistribution
from flatshare.workloads.model import WorkloadRequest
from flatshare.workloads.spec import parse_spec
from flatshare.workloads.tokens import Span


def _request(i: int, template: str, out: int) -> WorkloadRequest:
    return WorkloadRequest(
        id=f"r{i}",
        session_id=f"r{i}",
        cls="chat",
        priority=0,
        prompt=(Span(template, 32), Span(f"tail/{i}", 200)),
        max_tokens=out,
        pause_before_s=float(i),
        arrival_s=float(i),
    )


def test_history_per_template_beats_the_prior_and_is_calibrated() -> None:
    rng = np.random.default_rng(3)
    requests = []
    for i in range(600):
        template = "qa" if i % 2 else "essay"
        centre = 20 if template == "qa" else 700
        requests.append(_request(i, template, max(1, int(rng.lognormal(np.log(centre), 0.3)))))
    result = calibrate(requests)
    assert result.median_abs_log2_error < 0.5 < result.prior_median_abs_log2_error
    assert 0.4 <= result.coverage_50 <= 0.65 and 0.8 <= result.coverage_90 <= 0.98
    assert max(result.pit_histogram) < 0.2  # no bin holds twice its share


def test_a_realized_length_outside_the_support_has_an_extreme_pit() -> None:
    dist = LengthDistribution((10, 20), (1.0, 1.0))
    assert randomized_pit(dist, 5, 0.7) == 0.0
    assert randomized_pit(dist, 50, 0.7) == 1.0
    assert randomized_pit(dist, 20, 0.5) == 0.75


def test_on_the_azure_conversation_trace_the_history_helps(traces_dir: Path) -> None:
    path = traces_dir / "azure-llm-2023" / "AzureLLMInferenceTrace_conv.csv"
    requests = list(parse_spec(f"azure:{path},start=600,duration=100").requests())
    result = calibrate(requests)
    assert result.n == len(requests) > 100
    assert result.median_abs_log2_error < result.prior_median_abs_log2_error
    assert abs(result.coverage_90 - 0.9) < 0.1
