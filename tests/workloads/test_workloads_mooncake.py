from __future__ import annotations

import json
from pathlib import Path

import pytest

from flatshare.errors import InputError
from flatshare.workloads.traces import TraceOptions, load_mooncake


def test_conversation_trace(traces_dir: Path) -> None:
    w = load_mooncake(traces_dir / "mooncake-fast25" / "conversation_trace.jsonl")
    requests = list(w.requests())
    assert w.n_requests == 12031
    assert min(r.prompt_tokens for r in requests) >= 1 and max(r.prompt_tokens for r in requests) == 126195
    assert all(r.max_tokens >= 1 for r in requests)
    assert requests[-1].arrival_s == pytest.approx(3536.999)


def test_synthetic_trace_rows(traces_dir: Path) -> None:
    assert load_mooncake(traces_dir / "mooncake-fast25" / "synthetic_trace.jsonl").n_requests == 3993


def test_shared_hash_ids_give_shared_token_prefixes(traces_dir: Path) -> None:
    path = traces_dir / "mooncake-fast25" / "conversation_trace.jsonl"
    records = [json.loads(line) for line in path.open().readlines()[:200]]
    w = load_mooncake(path, TraceOptions(limit=200))
    requests = list(w.requests())
    # The first two records start with hash id 0 and then differ: one shared 512-token block.
    assert records[0]["hash_ids"][:2] == [0, 1] and records[1]["hash_ids"][:2] == [0, 14]
    a, b = requests[0].prompt_token_ids, requests[1].prompt_token_ids
    assert a[:512] == b[:512]
    assert a[512:1024] != b[512:1024]
    assert len(a) == records[0]["input_length"]


def test_clipping_keeps_the_head(traces_dir: Path) -> None:
    path = traces_dir / "mooncake-fast25" / "conversation_trace.jsonl"
    full = list(load_mooncake(path, TraceOptions(limit=50)).requests())
    clipped = list(load_mooncake(path, TraceOptions(limit=50, max_model_len=4096)).requests())
    assert all(r.prompt_tokens + r.max_tokens <= 4096 for r in clipped)
    long = next(i for i, r in enumerate(full) if r.prompt_tokens > 8192)
    n = clipped[long].prompt_tokens
    assert clipped[long].prompt_token_ids == full[long].prompt_token_ids[:n]


@pytest.mark.parametrize(
    ("line", "match"),
    [
        ('{"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [1, 2]', "not valid JSON"),
        ('{"timestamp": 0, "output_length": 5, "hash_ids": [1, 2]}', "field 'input_length': missing"),
        (
            '{"timestamp": -3, "input_length": 600, "output_length": 5, "hash_ids": [1, 2]}',
            "field 'timestamp'",
        ),
        (
            '{"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [1, 2, 3]}',
            "3 blocks of 512",
        ),
        (
            '{"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [1, "x"]}',
            "field 'hash_ids'",
        ),
        (
            '{"timestamp": 0, "input_length": 600, "output_length": "5", "hash_ids": [1, 2]}',
            "'output_length'",
        ),
        ("[1, 2]", "expected a JSON object"),
    ],
)
def test_malformed_lines_name_file_line_and_field(tmp_path: Path, line: str, match: str) -> None:
    path = tmp_path / "bad.jsonl"
    good = '{"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [1, 2]}'
    path.write_text(f"{good}\n{line}\n")
    with pytest.raises(InputError, match=rf"bad\.jsonl: line 2: .*{match}"):
        load_mooncake(path)
