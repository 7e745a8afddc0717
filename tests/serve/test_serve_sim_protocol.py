"""serve-sim's tokenizer and request validation, without a server or vLLM."""

from __future__ import annotations

from typing import Any

import pytest

from flatshare.serve.protocol import (
    DEFAULT_MAX_TOKENS,
    ApiError,
    ServedModel,
    chat_prompt,
    parse_chat,
    parse_completion,
    parse_json_object,
    parse_tokenize,
)
from flatshare.serve.tokenizer import WORDS, SimTokenizer

TOK = SimTokenizer(seed=0)
SERVED = ServedModel("sim", max_model_len=100, priority_enabled=True)


def test_tokenizer_is_stable_and_splits_words_and_punctuation() -> None:
    ids = TOK.encode("Hello, world! Hello")
    assert len(ids) == 5  # Hello , world ! Hello
    assert ids[0] == ids[4] != ids[2]
    assert ids == SimTokenizer(seed=0).encode("Hello ,   world!\nHello")  # whitespace does not matter
    assert SimTokenizer(seed=1).encode("Hello") != TOK.encode("Hello")
    assert all(4 <= i < TOK.vocab_size for i in TOK.encode("a b c d e f g h ; : . ,"))


def test_tokenizer_shares_prefixes_like_a_real_one() -> None:
    base = "system: you are a coding agent. " * 20
    a, b = TOK.encode(base + "fix the bug"), TOK.encode(base + "write a test")
    assert a[: len(TOK.encode(base))] == b[: len(TOK.encode(base))]


def test_output_text_is_one_vocabulary_word_per_token() -> None:
    text = TOK.output_text(0, 12)
    words = text.split()
    assert len(words) == 12 and text.startswith(" ")
    assert set(words) <= set(WORDS)
    assert TOK.output_text(0, 5) + TOK.output_text(5, 7) == text


@pytest.mark.parametrize(
    "prompt, n",
    [("a b c", 3), ([5, 6, 7, 8], 4), (["a b"], 2), ([[9, 10]], 2)],
)
def test_completion_prompt_shapes(prompt: Any, n: int) -> None:
    gen = parse_completion({"prompt": prompt, "max_tokens": 3, "priority": -2}, TOK, SERVED)
    assert len(gen.prompt_token_ids) == n
    assert (gen.max_tokens, gen.priority, gen.stream, gen.model) == (3, -2, False, "sim")


def test_completion_defaults() -> None:
    gen = parse_completion(
        {"prompt": "x", "stream": True, "stream_options": {"include_usage": True}}, TOK, SERVED
    )
    assert gen.max_tokens == DEFAULT_MAX_TOKENS and gen.priority == 0 and gen.stream and gen.include_usage


def test_chat_template_and_max_completion_tokens() -> None:
    messages = [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": [{"type": "text", "text": "hi"}]},
    ]
    assert chat_prompt(messages) == "system: be brief\nuser: hi\nassistant:"
    gen = parse_chat({"messages": messages, "max_tokens": 9, "max_completion_tokens": 4}, TOK, SERVED)
    assert gen.max_tokens == 4
    assert list(gen.prompt_token_ids) == TOK.encode(chat_prompt(messages))
    assert parse_tokenize({"messages": messages}, TOK, SERVED) == list(gen.prompt_token_ids)


@pytest.mark.parametrize(
    "body, status, fragment",
    [
        ({}, 400, "'prompt' is required"),
        ({"prompt": ""}, 400, "prompt is empty"),
        ({"prompt": 5}, 400, "must be a string, a list of token ids"),
        ({"prompt": ["a", "b"]}, 400, "only one prompt"),
        ({"prompt": [1, 99999]}, 400, "out of vocabulary"),
        ({"prompt": "x", "max_tokens": 0}, 400, "max_tokens must be at least 1"),
        ({"prompt": "x", "max_tokens": "5"}, 400, "'max_tokens' must be an integer"),
        ({"prompt": list(range(4, 105))}, 400, "maximum context length is 100 tokens"),
        ({"prompt": list(range(4, 54)), "max_tokens": 60}, 400, "for a total of 110 tokens"),
        ({"prompt": "x", "n": 2}, 400, "only n=1"),
        ({"prompt": "x", "stream": "yes"}, 400, "'stream' must be true or false"),
        ({"prompt": "x", "model": "gpt-9"}, 404, "The model `gpt-9` does not exist."),
    ],
)
def test_bad_completion_requests(body: dict[str, Any], status: int, fragment: str) -> None:
    with pytest.raises(ApiError) as caught:
        parse_completion(body, TOK, SERVED)
    assert caught.value.status == status
    assert fragment in caught.value.message


def test_priority_needs_the_priority_policy_like_vllm() -> None:
    fcfs = ServedModel("sim", 100, priority_enabled=False)
    assert parse_completion({"prompt": "x", "priority": 0}, TOK, fcfs).priority == 0
    with pytest.raises(ApiError, match="Priority scheduling is not enabled"):
        parse_completion({"prompt": "x", "priority": 3}, TOK, fcfs)


@pytest.mark.parametrize("raw", [b"{not json", b"[1, 2]", b"\xff\xfe"])
def test_body_must_be_a_json_object(raw: bytes) -> None:
    with pytest.raises(ApiError) as caught:
        parse_json_object(raw)
    assert caught.value.status == 400


@pytest.mark.parametrize(
    "messages", [None, [], ["hi"], [{"content": "no role"}], [{"role": "user", "content": 3}]]
)
def test_bad_chat_messages(messages: Any) -> None:
    with pytest.raises(ApiError, match="messages"):
        parse_chat({"messages": messages}, TOK, SERVED)
