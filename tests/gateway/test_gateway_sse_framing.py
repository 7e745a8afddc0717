"""Event streams framed as the SSE spec allows (issue 32, item 2): CRLF, LF and CR line ends, an event
bounded in size, each byte scanned once. Unit cases on the framer, then a fake backend over real HTTP."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator

import httpx
import pytest
from gatewaykit import gateway_config, read_events, running_gateway, scrape

from flatshare.gateway.backendlimits import BackendLimits
from flatshare.gateway.sse import EventFramer, EventTooLarge
from flatshare.protocol.sse import SseSplitter, event_data
from kit.fake_vllm import FakeState, fake_backend_app
from kit.net import ThreadServer

BODY = {"model": "fake", "prompt": "hi", "max_tokens": 4, "stream": True}


@pytest.mark.parametrize("end", ["\r\n", "\r", "\n"], ids=["CRLF", "CR", "LF"])
def test_framer_cuts_at_blank_lines_of_any_line_end(end: str) -> None:
    """Before: only `\\n\\n` ended an event, so a CRLF stream was held back to its end."""
    e = end.encode()
    first = b'data: {"choices":[{"text":"a"}]}' + e + e
    framer = EventFramer()
    assert framer.feed(first + b"data: [DO") == first
    assert framer.first_token and not framer.done
    assert framer.feed(b"NE]" + e + e) == b"data: [DONE]" + e + e
    assert framer.done and framer.flush() == b""


def test_a_crlf_split_after_its_cr_is_one_line_end() -> None:
    framer = EventFramer()
    assert framer.feed(b"data: 1\r\n\r") == b"data: 1\r\n\r"  # the blank line ends at its CR
    assert framer.feed(b"\n") == b""  # its LF: not another blank line
    assert framer.feed(b"data: 2\r") == b""
    assert framer.feed(b"\n\r\n") == b"\ndata: 2\r\n\r\n"
    assert event_data(b"data: 1\r\n\r" + b"\ndata: 2\r\n\r\n") == [b"1", b"2"]


def test_event_data_follows_the_spec() -> None:
    events = b"data: a\r\ndata:b\r\n\r\n: comment\n\nretry: 5\n\nevent: x\rdata\r\r"
    assert event_data(events) == [b"a\nb", b""]
    splitter = SseSplitter()
    assert splitter.feed(b'data: {"a": 1}\r\n\r') == ['{"a": 1}']
    assert splitter.feed(b"\n") == [] and not splitter.pending


def test_an_event_past_the_bound_raises_and_the_scan_is_linear() -> None:
    """Before: a stream with no blank line was buffered whole and re-copied on every chunk."""
    framer = EventFramer(max_event_bytes=64 * 1024)
    framer.feed(b"data: ")
    with pytest.raises(EventTooLarge, match="65536"):
        for _ in range(100):
            framer.feed(b"x" * 4096)


@pytest.fixture
def backend() -> Iterator[tuple[FakeState, str]]:
    state = FakeState()
    with ThreadServer(fake_backend_app(state)) as server:
        yield state, server.url


def test_a_crlf_stream_is_relayed_event_by_event(backend: tuple[FakeState, str]) -> None:
    """The backend sends one CRLF-framed event and waits for the client to have it before sending the
    rest. Before: the gateway held it back until the stream ended (the backend waited its 10 s out), and
    no first-token time was recorded."""
    state, url = backend
    state.line_end = "\r\n"
    state.hold_after_first = threading.Event()
    with running_gateway(gateway_config([url])) as (_, gw):
        with httpx.stream("POST", f"{gw}/v1/completions", json=BODY, timeout=30) as response:
            lines = response.iter_lines()
            first = next(line for line in lines if line.startswith("data: "))
            state.hold_after_first.set()
            rest = [line for line in lines if line.startswith("data: ")]
        assert json.loads(first.removeprefix("data: "))["choices"][0]["text"] == " t0"
        assert rest[-1] == "data: [DONE]" and len(rest) == 4
        assert state.held_released == [True]
        assert scrape(gw)["flatshare_gateway_upstream_ttft_seconds_count{class=default}"] == 1


def test_an_unending_event_is_a_clean_upstream_error(backend: tuple[FakeState, str]) -> None:
    """3 MB of one event that never ends, against a 1 MiB bound: the client gets an error event and
    `[DONE]`, counted as a mid-stream upstream failure."""
    state, url = backend
    state.unframed_bytes = 3 * 1024 * 1024
    config = gateway_config([url], backend_limits=BackendLimits(max_event_bytes=1024 * 1024))
    with running_gateway(config) as (_, gw):
        with httpx.stream("POST", f"{gw}/v1/completions", json=BODY, timeout=30) as response:
            assert response.status_code == 200
            events = read_events(response)
        assert events[-1] == "[DONE]" and len(events) == 2
        error = json.loads(events[0])["error"]
        assert error["code"] == 502 and "1048576 bytes" in error["message"]
        assert scrape(gw)["flatshare_gateway_errors_total{kind=upstream_midstream}"] == 1
