from __future__ import annotations

import json
from pathlib import Path

import pytest

from flatshare.errors import InputError
from flatshare.workloads.traces import TraceOptions, load_sharegpt

CONVERSATIONS = [
    {
        "id": "c1",
        "conversations": [
            {"from": "human", "value": "What is a KV cache?"},
            {
                "from": "gpt",
                "value": "It keeps the keys and values of past tokens, so they are not recomputed.",
            },
            {"from": "human", "value": "Why does it fill up?"},
            {"from": "gpt", "value": "Every running request holds blocks for its whole context."},
        ],
    },
    {"id": "c2", "conversations": [{"from": "gpt", "value": "Hello!"}]},
    {
        "id": "c3",
        "conversations": [
            {"from": "system", "value": "Be brief."},
            {"from": "human", "value": "Hi"},
            {"from": "gpt", "value": "Hello."},
        ],
    },
]


def write(tmp_path: Path, data: object) -> Path:
    path = tmp_path / "sharegpt.json"
    path.write_text(json.dumps(data))
    return path


def test_turns_become_dependent_requests(tmp_path: Path) -> None:
    w = load_sharegpt(write(tmp_path, CONVERSATIONS), seed=1)
    assert [len(s.requests) for s in w.sessions] == [2, 1]  # c2 has no answered user turn
    first, second = w.sessions[0].requests
    assert first.max_tokens == 16  # pieces of the first answer
    assert first.prompt_tokens == 8  # "user : What is a KV cache ?"
    assert second.prompt_token_ids[: first.prompt_tokens] == first.prompt_token_ids
    assert second.text is not None and second.text.startswith(
        "user: What is a KV cache?\nassistant: It keeps"
    )
    assert second.prompt_tokens == 8 + 18 + 8  # user turn, "assistant: " + answer, user turn
    assert w.sessions[1].requests[0].text == "system: Be brief.\nuser: Hi\n"


def test_single_turn_seed_and_clipping(tmp_path: Path) -> None:
    path = write(tmp_path, CONVERSATIONS)
    w = load_sharegpt(path, TraceOptions(max_model_len=12), seed=1, multi_turn=False)
    assert w.n_requests == 2
    assert all(r.prompt_tokens + r.max_tokens <= 12 for r in w.requests())
    assert load_sharegpt(path, seed=1) == load_sharegpt(path, seed=1)
    assert load_sharegpt(path, seed=1) != load_sharegpt(path, seed=2)


@pytest.mark.parametrize(
    ("data", "match"),
    [
        ({"id": 1}, r"top level: field '\(file\)'"),
        (
            [{"id": "a", "conversations": [{"from": "robot", "value": "x"}]}],
            r"conversation 0, turn 0: field 'from'",
        ),
        (
            [{"id": "a", "conversations": [{"from": "human", "value": 3}]}],
            r"conversation 0, turn 0: field 'value'",
        ),
        ([CONVERSATIONS[0], {"id": "b"}], r"conversation 1: field 'conversations'"),
    ],
)
def test_malformed_files_name_the_record_and_field(tmp_path: Path, data: object, match: str) -> None:
    with pytest.raises(InputError, match=rf"sharegpt\.json: {match}"):
        load_sharegpt(write(tmp_path, data))


def test_no_usable_conversation(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no answered user turns"):
        load_sharegpt(write(tmp_path, [CONVERSATIONS[1]]))
