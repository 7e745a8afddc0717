"""A backend that answers its polls with garbage (issue 32, item 1): every case is a failed poll, counted
and logged once; the poller lives on, the backend turns unhealthy and comes back on the next good page;
`/gateway/backends` never fails on what a backend sent. Over real HTTP on loopback (`kit.fake_vllm`)."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Iterator
from contextlib import ExitStack

import httpx
import pytest
from gatewaykit import backend_rows, captured_logs, gateway_config, running_gateway, scrape

from flatshare.gateway.backendlimits import BackendLimits
from flatshare.gateway.backends import BackendState
from flatshare.gateway.config import BackendConfig, PollConfig
from flatshare.gateway.poller import Poller
from flatshare.gateway.upstream_make import make_upstream
from flatshare.gateway.watch import TaskWatch
from flatshare.protocol.prometheus import ScrapeError, parse_load
from kit.fake_vllm import FakeState, fake_backend_app, metrics_page
from kit.net import ThreadServer, wait_for

GOOD = metrics_page("fake", 0.25, running=1, waiting=0, preemptions=2)
WAITING_LINE = 'vllm:num_requests_waiting{engine="1",model_name="fake"} 1e308\n'
BAD_PAGES = {
    "running +Inf": metrics_page("fake", 0.25, running=float("inf"), waiting=0),
    "waiting sum overflows": metrics_page("fake", 0.25, running=1, waiting=1e308) + WAITING_LINE,
    "preemptions NaN": metrics_page("fake", 0.25, running=1, waiting=0, preemptions=float("nan")),
    "kv NaN": metrics_page("fake", float("nan"), running=1, waiting=0),
    "kv -Inf": metrics_page("fake", float("-inf"), running=1, waiting=0),
    "running negative": metrics_page("fake", 0.25, running=-3, waiting=0),
}


@pytest.mark.parametrize("page", BAD_PAGES.values(), ids=BAD_PAGES.keys())
def test_non_finite_metrics_refuse_the_scrape(page: str) -> None:
    """Before: OverflowError (+Inf, the overflowing sum), or NaN and -Inf KV use read as 0.0."""
    with pytest.raises(ScrapeError, match="refusing the whole page"):
        parse_load(page)


@pytest.fixture
def backend() -> Iterator[tuple[FakeState, str]]:
    state = FakeState()
    with ThreadServer(fake_backend_app(state)) as server:
        yield state, server.url


@pytest.mark.parametrize("name", ["running +Inf", "waiting sum overflows", "preemptions NaN"])
def test_one_bad_page_is_a_failed_poll_and_the_backend_comes_back(
    backend: tuple[FakeState, str], name: str
) -> None:
    """Before: the poller died on OverflowError and the backend stayed healthy for good (or, with NaN
    preemptions, /gateway/backends answered 500)."""
    state, url = backend
    with captured_logs() as logs, running_gateway(gateway_config([url])) as (_, gw):
        assert backend_rows(gw)["b0"]["healthy"]
        state.metrics_text = BAD_PAGES[name]
        wait_for(lambda: not backend_rows(gw)["b0"]["healthy"], 5, "the bad page to make b0 unhealthy")
        row = backend_rows(gw)["b0"]
        assert "ScrapeError" in row["error"] and row["poller"] == "running"
        assert httpx.get(f"{gw}/health", timeout=5).status_code == 503
        errors = scrape(gw)["flatshare_gateway_task_errors_total{error=ScrapeError,task=poll-b0}"]
        assert errors >= 2
        state.metrics_text = None
        wait_for(lambda: backend_rows(gw)["b0"]["healthy"], 5, "b0 to recover on a good page")
        assert scrape(gw)["flatshare_gateway_task_up{task=poll-b0}"] == 1
    warned = [line for line in logs.lines if "poll failed" in line]
    assert len(warned) == 1, warned  # logged once, however many polls failed
    assert not logs.tracebacks()


def test_a_deeply_nested_models_answer_is_a_failed_poll(backend: tuple[FakeState, str]) -> None:
    """Before: RecursionError ended the poller at its first poll; the backend was never healthy."""
    state, url = backend
    state.models_body = b"[" * 100_000 + b"]" * 100_000
    with running_gateway(gateway_config([url])) as (_, gw):
        wait_for(lambda: "nested" in backend_rows(gw)["b0"]["error"], 5, "the deep answer to be refused")
        assert not backend_rows(gw)["b0"]["healthy"]
        state.models_body = None
        wait_for(lambda: backend_rows(gw)["b0"]["healthy"], 5, "b0 to recover")


def test_a_metrics_page_over_the_limit_is_refused(backend: tuple[FakeState, str]) -> None:
    state, url = backend
    state.metrics_text = GOOD + "# padding\n" * 2000  # 20 kB
    config = gateway_config([url], backend_limits=BackendLimits(max_metrics_bytes=16 * 1024))
    with running_gateway(config) as (_, gw):
        wait_for(lambda: "AnswerTooLarge" in backend_rows(gw)["b0"]["error"], 5, "the page to be refused")
        assert not backend_rows(gw)["b0"]["healthy"]
        state.metrics_text = None
        wait_for(lambda: backend_rows(gw)["b0"]["healthy"], 5, "b0 to recover")


SLOW_POLL = PollConfig(interval_s=60.0, timeout_s=5.0, stale_after_s=120.0, unhealthy_after_failures=2)


def test_a_large_page_is_parsed_off_the_event_loop(
    backend: tuple[FakeState, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import flatshare.gateway.poller as poller_module

    state, url = backend
    state.metrics_text = GOOD + 'python_info{x="' + "y" * 300_000 + '"} 1\n'
    threads: list[int] = []
    real = poller_module._parse

    def parse(body: bytes, name: str) -> object:
        threads.append(threading.get_ident())
        return real(body, name)

    monkeypatch.setattr(poller_module, "_parse", parse)

    async def go() -> int:
        upstream = make_upstream("auto", [url], 1.0, 5.0, 4)
        try:
            assert await Poller(BackendState(BackendConfig(url, "b0"), SLOW_POLL), upstream).poll_once()
        finally:
            await upstream.close()
        return threading.get_ident()

    loop_thread = asyncio.run(go())
    assert threads and threads[0] != loop_thread


def test_a_poller_that_dies_anyway_is_flagged_and_its_backend_unhealthy(
    backend: tuple[FakeState, str], caplog: pytest.LogCaptureFixture
) -> None:
    """A bug outside a poll round (here: the clock failing in the tick arithmetic) ends the task: the
    watch marks it down and the backend is unhealthy, not healthy-and-stale for good."""
    _, url = backend
    calls = 0

    def clock() -> float:
        nonlocal calls
        calls += 1
        if calls > 3:
            raise RuntimeError("clock broke")
        return 1000.0 + calls

    async def go() -> tuple[BackendState, TaskWatch]:
        upstream = make_upstream("auto", [url], 1.0, 5.0, 4)
        watch = TaskWatch()
        state = BackendState(BackendConfig(url, "b0"), SLOW_POLL)
        poller = Poller(state, upstream, clock, watch=watch)
        try:
            poller.start()
            for _ in range(100):
                await asyncio.sleep(0.02)
                if state.poller == "dead":
                    break
        finally:
            await upstream.close()
        return state, watch

    caplog.set_level(logging.ERROR, logger="flatshare.gateway")
    state, watch = asyncio.run(go())
    assert state.poller == "dead" and not state.healthy and "clock broke" in state.last_error
    assert watch.up == {"poll-b0": False}
    assert watch.errors["poll-b0", "RuntimeError"] >= 1
    assert any("background task poll-b0 died" in r.getMessage() for r in caplog.records)


def test_backends_page_serves_json_whatever_a_backend_sent(backend: tuple[FakeState, str]) -> None:
    """Every bad page in turn: /gateway/backends answers 200 with finite numbers (Starlette's JSON
    refuses NaN: before, `preemptions NaN` made it answer 500)."""
    state, url = backend
    with ExitStack() as stack:
        _, gw = stack.enter_context(running_gateway(gateway_config([url])))
        for page in BAD_PAGES.values():
            state.metrics_text = page
            for _ in range(3):
                answer = httpx.get(f"{gw}/gateway/backends", timeout=5)
                assert answer.status_code == 200, answer.text
                assert "NaN" not in answer.text and "Infinity" not in answer.text
