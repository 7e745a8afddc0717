from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from flatshare.workloads.tokens import (
    FIRST_ID,
    Span,
    TextSpan,
    hash_block_spans,
    head_spans,
    ids_for_prefix_group,
    ids_from_hash_ids,
    prompt_ids,
    split_words,
    unique_ids,
)


def test_equal_hash_ids_give_equal_blocks() -> None:
    a = ids_from_hash_ids([7, 8, 9], 16, 48)
    b = ids_from_hash_ids([7, 8, 5], 16, 48)
    assert a[:32] == b[:32]
    assert a[32:] != b[32:]


def test_hash_ids_truncate_and_pad_to_total() -> None:
    assert len(ids_from_hash_ids([1, 2, 3], 16, 40)) == 40
    assert ids_from_hash_ids([1, 2, 3], 16, 40) == ids_from_hash_ids([1, 2, 3], 16, 48)[:40]
    padded = ids_from_hash_ids([1, 2], 16, 45)  # full blocks only, as in the WEKA trace
    assert len(padded) == 45
    assert padded[:32] == ids_from_hash_ids([1, 2], 16, 32)
    spans = hash_block_spans([1, 2], 16, 45, tail_key="mine")
    assert spans[-1] == Span("mine", 13)


@pytest.mark.parametrize("vocab", [512, 32000, 128256])
def test_ids_stay_in_vocab_and_skip_special_tokens(vocab: int) -> None:
    ids = ids_from_hash_ids(list(range(40)), 64, 2560, vocab=vocab) + unique_ids("x", 3000, vocab)
    ids += prompt_ids([TextSpan("Hello, world! " * 50)], vocab)
    assert min(ids) >= FIRST_ID
    assert max(ids) < vocab
    assert len(set(ids)) > min(vocab, 2000) // 2


def test_groups_and_unique_keys() -> None:
    assert ids_for_prefix_group("sys", 10) == ids_for_prefix_group("sys", 20)[:10]
    assert ids_for_prefix_group("sys", 10) != unique_ids("sys", 10)
    assert unique_ids("a", 10) != unique_ids("b", 10)


def test_text_spans_hash_words() -> None:
    assert split_words("Hello, world!") == ["Hello", ",", "world", "!"]
    a = TextSpan("the cat sat").ids()
    b = TextSpan("the dog sat").ids()
    assert a[0] == b[0] and a[2] == b[2] and a[1] != b[1]
    assert TextSpan("a b c d").head(2).length == 2


def test_head_spans_keeps_the_first_tokens() -> None:
    spans = (Span("x", 10), TextSpan("one two three"), Span("y", 5))
    head = head_spans(spans, 12)
    assert sum(s.length for s in head) == 12
    assert prompt_ids(head) == prompt_ids(spans)[:12]


def test_ids_are_the_same_in_another_process() -> None:
    code = (
        "from flatshare.workloads.tokens import ids_from_hash_ids, TextSpan, prompt_ids;"
        "print(sum(ids_from_hash_ids([3, 1, 4], 64, 150, vocab=512)),"
        " sum(prompt_ids([TextSpan('hi there')])))"
    )
    src = str(Path(__file__).resolve().parents[2] / "src")
    env = dict(os.environ, PYTHONHASHSEED="12345", PYTHONPATH=src)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    here = (
        f"{sum(ids_from_hash_ids([3, 1, 4], 64, 150, vocab=512))} {sum(prompt_ids([TextSpan('hi there')]))}"
    )
    assert out.stdout.strip() == here
