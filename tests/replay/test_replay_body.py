"""Request bodies: the fast JSON encoding of prompt ids gives exactly the workload's prompt."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from flatshare.replay.body import json_int_array, request_body
from flatshare.workloads.model import WorkloadRequest
from flatshare.workloads.tokens import Span, TextSpan


@given(
    st.integers(1, 3_000_000).flatmap(
        lambda below: st.tuples(st.just(below), st.lists(st.integers(0, below - 1)))
    )
)
def test_json_int_array_round_trips(case: tuple[int, list[int]]) -> None:
    below, values = case
    assert json.loads(json_int_array(np.array(values, dtype=np.int64), below)) == values


def test_json_int_array_refuses_values_out_of_range() -> None:
    with pytest.raises(ValueError):
        json_int_array(np.array([5]), 5)
    with pytest.raises(ValueError):
        json_int_array(np.array([-1]), 5)


@pytest.mark.parametrize("vocab", [512, 32000, 151_936])
def test_the_body_holds_the_prompt_ids_and_the_settings(vocab: int) -> None:
    prompt = (Span("group/sys", 300), TextSpan("Hello, caller: how can I help?"), Span("unique/x", 7))
    request = WorkloadRequest("v/0", "v", "voice", 0, prompt, 23, vocab_size=vocab)
    body = json.loads(request_body(request, "tiny"))
    assert body["prompt"] == list(request.prompt_token_ids)
    assert {k: v for k, v in body.items() if k != "prompt"} == {
        "model": "tiny",
        "max_tokens": 23,
        "priority": 0,
        "stream": True,
        "stream_options": {"include_usage": True, "continuous_usage_stats": True},
        "ignore_eos": True,
        "temperature": 0,
    }
    assert "model" not in json.loads(request_body(request, None, send_priority=False))
