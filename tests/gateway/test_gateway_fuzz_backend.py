"""The gateway's backend-facing readers fuzzed (issue 32): what a broken or hostile backend sends.

- /metrics pages with non-finite, huge and negative numbers, over several engines: `parse_load` returns
  finite readings or raises `ScrapeError`, never anything else, and what it returns fits strict JSON.
- /v1/models answers of odd JSON (deep nesting, huge numbers, lone surrogates) served over real HTTP
  to a real poller: every poll ends (good or failed), the poller is never dead, nothing is logged twice.
- event streams with every mix of CR, LF and CRLF line ends cut into arbitrary pieces: the framer passes
  every byte through unchanged, cuts only at event ends, and reads the same events as a whole-stream parse.

Bounded for `make test` (fixed examples, `kit.fuzz`); `FLATSHARE_FUZZ=long` (`make fuzz`) runs 20x more."""

from __future__ import annotations

import asyncio
import itertools
import json
import math
from collections.abc import Iterator

import pytest
from hypothesis import given
from hypothesis import strategies as st

from flatshare.gateway.backends import BackendState
from flatshare.gateway.config import BackendConfig, PollConfig
from flatshare.gateway.poller import Poller
from flatshare.gateway.sse import EventFramer
from flatshare.gateway.upstream_make import make_upstream
from flatshare.gateway.watch import TaskWatch
from flatshare.protocol.prometheus import ScrapeError, parse_load
from flatshare.protocol.sse import event_data
from kit.fake_vllm import FakeState, fake_backend_app
from kit.fuzz import fuzz_settings, odd_json
from kit.net import ThreadServer

pytestmark = pytest.mark.fuzz

FAMILIES = ("vllm:kv_cache_usage_perc", "vllm:num_requests_running", "vllm:num_requests_waiting")


def metric_value() -> st.SearchStrategy[str]:
    """A sample value as a backend may write it: ordinary, non-finite, huge, negative, or odd text."""
    return st.one_of(
        st.floats(0, 1).map(repr),
        st.sampled_from(
            ["+Inf", "-Inf", "NaN", "1e308", "-1e308", "1.7976931348623157e308", "9" * 400, "-0"]
        ),
        st.integers(-(2**64), 2**64).map(str),
        st.floats().map(repr),
    )


def metrics_pages() -> st.SearchStrategy[str]:
    sample = st.tuples(
        st.sampled_from([*FAMILIES, "vllm:num_preemptions_total"]), st.integers(0, 3), metric_value()
    )
    lines = st.lists(sample, min_size=1, max_size=12).map(
        lambda samples: "".join(
            f'{name}{{engine="{e}",model_name="m"}} {value}\n' for name, e, value in samples
        )
    )
    return lines


@fuzz_settings(300)
@given(page=metrics_pages())
def test_metrics_pages_give_finite_readings_or_a_scrape_error(page: str) -> None:
    try:
        metrics = parse_load(page)
    except ScrapeError:
        return
    values = [metrics.kv_usage, metrics.running, metrics.waiting, metrics.preemptions]
    assert all(math.isfinite(v) for v in values)
    assert 0 <= metrics.kv_usage <= 1 and metrics.running >= 0 and metrics.waiting >= 0
    json.dumps(values, allow_nan=False)


@pytest.fixture(scope="module")
def backend() -> Iterator[tuple[FakeState, str]]:
    state = FakeState()
    with ThreadServer(fake_backend_app(state)) as server:
        yield state, server.url


POLL = PollConfig(interval_s=60.0, timeout_s=2.0, stale_after_s=120.0, unhealthy_after_failures=2)


@fuzz_settings(60)
@given(models=odd_json(), page=st.one_of(st.none(), metrics_pages()))
def test_a_poller_survives_any_answer(backend: tuple[FakeState, str], models: str, page: str | None) -> None:
    state, url = backend
    state.models_body = models.encode("utf-8", "surrogatepass")
    state.metrics_text = page

    async def go() -> tuple[bool, bool, TaskWatch]:
        upstream = make_upstream("auto", [url], 1.0, 5.0, 4)
        watch = TaskWatch()
        backend_state = BackendState(BackendConfig(url, "b0"), POLL)
        poller = Poller(backend_state, upstream, watch=watch)
        try:
            bad = await poller.poll_once()
            state.models_body, state.metrics_text = None, None  # then a good backend: the next poll is good
            good = await poller.poll_once()
        finally:
            await upstream.close()
        return bad, good, watch

    bad, good, watch = asyncio.run(go())
    assert good
    assert bad or sum(watch.errors.values()) == 1


LINE_ENDS = st.sampled_from([b"\n", b"\r\n", b"\r"])


def sse_streams() -> st.SearchStrategy[tuple[bytes, list[bytes]]]:
    """(stream, the data of its events): events of data and comment lines, each line end drawn apart."""
    line = st.one_of(
        st.binary(max_size=20).map(lambda b: b"data: " + b.replace(b"\r", b"").replace(b"\n", b"")),
        st.just(b": keep-alive"),
        st.just(b"data: [DONE]"),
    )
    event = st.tuples(st.lists(st.tuples(line, LINE_ENDS), min_size=1, max_size=3), LINE_ENDS)

    def event_bytes(lines: list[tuple[bytes, bytes]], blank: bytes) -> bytes:
        if lines[-1][1] == b"\r" and blank.startswith(b"\n"):  # CR then LF is one line end, not a blank line
            lines = [*lines[:-1], (lines[-1][0], b"\r\n")]
        return b"".join(text + end for text, end in lines) + blank

    def build(events: list[tuple[list[tuple[bytes, bytes]], bytes]]) -> tuple[bytes, list[bytes]]:
        stream = b"".join(event_bytes(lines, blank) for lines, blank in events)
        expected = []
        for lines, _ in events:
            data = [text[6:] for text, _ in lines if text.startswith(b"data: ")]
            if data:
                expected.append(b"\n".join(data))
        return stream, expected

    return st.lists(event, max_size=6).map(build)


@fuzz_settings(400)
@given(stream=sse_streams(), cuts=st.lists(st.integers(0, 400), max_size=12))
def test_framer_relays_every_byte_and_cuts_only_at_event_ends(
    stream: tuple[bytes, list[bytes]], cuts: list[int]
) -> None:
    raw, expected = stream
    framer = EventFramer()
    relayed = []
    points = sorted({min(c, len(raw)) for c in cuts} | {0, len(raw)})
    for start, end in itertools.pairwise(points):
        ready = framer.feed(raw[start:end])
        relayed.append(ready)
    relayed.append(framer.flush())
    assert b"".join(relayed) == raw
    payloads = [p for piece in relayed for p in event_data(piece)]
    assert payloads == expected
    assert framer.done == (bool(expected) and expected[-1] == b"[DONE]")
