from __future__ import annotations

from pathlib import Path
from statistics import median

import pytest

from flatshare.errors import InputError
from flatshare.workloads.traces import TraceOptions, load_azure
from flatshare.workloads.traces.azure import parse_timestamp

HEADER = "TIMESTAMP,ContextTokens,GeneratedTokens\n"


@pytest.mark.parametrize(
    ("name", "rows", "ctx_median", "gen_median"),
    [("code", 8819, 1469, 13), ("conv", 19366, 1020, 129)],
)
def test_real_trace_rows_and_medians(
    traces_dir: Path, name: str, rows: int, ctx_median: int, gen_median: int
) -> None:
    w = load_azure(traces_dir / "azure-llm-2023" / f"AzureLLMInferenceTrace_{name}.csv")
    requests = list(w.requests())
    assert w.n_requests == len(w.sessions) == rows
    assert median(r.prompt_tokens for r in requests) == ctx_median
    assert median(r.max_tokens for r in requests) == gen_median
    arrivals = [r.arrival_s or 0.0 for r in requests]
    assert arrivals[0] == 0.0 and arrivals == sorted(arrivals)
    assert 3400 < arrivals[-1] < 3600  # one hour
    assert all(r.cls == "chat" and r.priority == 1 for r in requests)


def test_window_rate_limit_and_clipping(traces_dir: Path) -> None:
    path = traces_dir / "azure-llm-2023" / "AzureLLMInferenceTrace_conv.csv"
    full = load_azure(path)
    opts = TraceOptions(start_s=600, duration_s=300, rate=2.0, max_model_len=2048)
    w = load_azure(path, opts, cls="code")
    kept = [r for r in full.requests() if 600 <= (r.arrival_s or 0) < 900]
    assert w.n_requests == len(kept) > 0
    got = list(w.requests())
    assert all(0 <= (r.arrival_s or 0) < 150 for r in got)
    assert all(r.prompt_tokens + r.max_tokens <= 2048 for r in got)
    assert all(r.cls == "code" for r in got)
    assert load_azure(path, TraceOptions(limit=5)).n_requests == 5


def test_seven_fractional_digits() -> None:
    a = parse_timestamp("2023-11-16 18:15:46.6805900")
    b = parse_timestamp("2023-11-16 18:15:50.9951690")
    assert b - a == pytest.approx(4.314579, abs=1e-6)


@pytest.mark.parametrize(
    ("body", "match"),
    [
        ("2023-11-16 18:15:46.68,12,3\n16/11/2023,5,5\n", r"line 3: field 'TIMESTAMP'"),
        ("2023-11-16 18:15:46.68,twelve,3\n", r"line 2: field 'ContextTokens': expected an integer"),
        ("2023-11-16 18:15:46.68,0,3\n", r"line 2: field 'ContextTokens': expected an integer >= 1"),
        ("2023-11-16 18:15:46.68,12,-1\n", r"line 2: field 'GeneratedTokens'"),
        ("2023-11-16 18:15:46.68,12\n", r"line 2: .*expected 3 columns"),
        ("", r"the file has no records"),
    ],
)
def test_malformed_rows_name_file_line_and_field(tmp_path: Path, body: str, match: str) -> None:
    path = tmp_path / "bad.csv"
    path.write_text(HEADER + body)
    with pytest.raises(InputError, match=rf"bad\.csv: {match}"):
        load_azure(path)


def test_missing_column_and_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "cols.csv"
    path.write_text("TIMESTAMP,Context,GeneratedTokens\n2023-11-16 18:15:46.68,12,3\n")
    with pytest.raises(InputError, match=r"cols\.csv: line 1 \(header\): field 'ContextTokens': missing"):
        load_azure(path)
    with pytest.raises(InputError, match="no such file"):
        load_azure(tmp_path / "absent.csv")


def test_empty_window(traces_dir: Path) -> None:
    path = traces_dir / "azure-llm-2023" / "AzureLLMInferenceTrace_code.csv"
    with pytest.raises(InputError, match="no records in the chosen window"):
        load_azure(path, TraceOptions(start_s=100_000))
