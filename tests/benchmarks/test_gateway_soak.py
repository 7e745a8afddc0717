"""benchmarks/gateway_soak.py: its classification of what a client saw, its audit matching, and a tiny
soak run end to end (300 requests, a backend killed once) as a subprocess, checked from its JSON."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "benchmarks" / "gateway_soak.py"


def load_soak() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gateway_soak", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["gateway_soak"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


soak = load_soak()


def stream(*events: object) -> bytes:
    return b"".join(
        b"data: " + (e if isinstance(e, bytes) else json.dumps(e).encode()) + b"\n\n" for e in events
    )


TOKEN = {"choices": [{"index": 0, "text": " hi", "finish_reason": None}]}
FINISH = {"choices": [{"index": 0, "text": "", "finish_reason": "length"}]}
ERROR = {"error": {"message": "backend b0 failed mid-stream: closed", "type": "BadGatewayError", "code": 502}}


@pytest.mark.parametrize(
    ("status", "body", "kind"),
    [
        (200, stream(TOKEN, FINISH, b"[DONE]"), "completed"),
        (200, stream(TOKEN, FINISH, {"choices": [], "usage": {"total_tokens": 3}}, b"[DONE]"), "completed"),
        (200, stream(TOKEN, ERROR, b"[DONE]"), "clean_error"),
        (503, json.dumps({"error": {"message": "no healthy backend"}}).encode(), "clean_error"),
        (200, stream(TOKEN, FINISH), "truncation"),  # no [DONE]
        (200, stream(TOKEN, b"[DONE]"), "truncation"),  # [DONE] with neither a finish nor an error
        (200, stream(TOKEN, ERROR, TOKEN, b"[DONE]"), "truncation"),  # an error event not last
        (200, stream(TOKEN, ERROR), "truncation"),  # an error event without [DONE]
        (200, stream(TOKEN, b'{"choices": [', b"[DONE]"), "truncation"),  # a broken event
        (200, stream(TOKEN, FINISH, b"[DONE]", b"[DONE]"), "truncation"),
        (502, b"<html>Bad Gateway</html>", "truncation"),  # an error that is not a JSON error body
        (500, json.dumps({"detail": "oops"}).encode(), "truncation"),
        (200, b"", "truncation"),
    ],
)
def test_classify(status: int, body: bytes, kind: str) -> None:
    assert soak.classify(status, body)[0] == kind


def test_audit_figures_match_lines_to_requests() -> None:
    def line(rid: str, attempt: int = 1) -> str:
        return json.dumps({"request_id": rid, "attempt": attempt, "backend": "b0"})

    routing = json.dumps({"kind": "routing", "t": 1.0})
    lines = [line("soak-0"), line("soak-1"), line("soak-1", 2), routing, line("soak-3"), line("soak-3"), "{"]
    figures = soak.audit_figures(lines, 4)
    assert (figures.lines, figures.decisions, figures.first_attempts, figures.retries) == (7, 5, 4, 1)
    assert (figures.missing, figures.duplicated, figures.unreadable) == (1, 1, 1)
    assert figures.missing_examples == ["soak-2"]


def test_rss_growth_is_measured_over_the_second_half() -> None:
    samples = [(0, 1000), (50, 1100), (100, 1200), (150, 1260), (200, 1320)]
    rss = soak.rss_figures(samples, 200)
    assert (rss["start_kb"], rss["mid_kb"], rss["end_kb"]) == (1000, 1200, 1320)
    assert rss["growth_second_half_pct"] == 10.0


@pytest.mark.vllm  # its serve-sim backends import vLLM (in their own processes)
@pytest.mark.timeout(420)
def test_a_tiny_soak_with_one_kill_passes_its_checks(tmp_path: Path) -> None:
    out, report = tmp_path / "run", tmp_path / "soak.json"
    cmd = [sys.executable, str(SCRIPT), "--requests", "300", "--concurrency", "16", "--kill-every", "100"]
    cmd += ["--restart-after", "0.5", "--out", str(out), "--json", str(report)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=360, cwd=REPO)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    result = json.loads(report.read_text())
    outcomes = result["outcomes"]
    assert result["requests"] == 300 and sum(outcomes.values()) == 300
    assert outcomes["hang"] == 0 and outcomes["truncation"] == 0
    assert outcomes["completed"] >= 200  # the kill cuts only the streams on the killed backend
    assert len(result["kills"]) >= 1 and all(k["rejoined_s"] is not None for k in result["kills"])
    audit = result["audit"]
    assert audit["first_attempts"] == 300 and audit["missing"] == 0
    assert audit["lines"] == 300 + audit["retries"] == len((out / "audit.jsonl").read_text().splitlines())
    assert result["rss"]["start_kb"] > 0 and result["rss"]["growth_second_half_pct"] < 10
    assert result["passed"] and all(result["checks"].values())
    assert result["gateway_log_tracebacks"] == 0
