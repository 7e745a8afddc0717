"""The wall-clock driver against a fake streaming server (httpx mock transport, no network)."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable

import httpx
import pytest

from flatshare.protocol.sse import STREAM_OPTIONS
from flatshare.replay.endpoints import Endpoint, sticky_index
from flatshare.replay.ledger import NEVER_SENT, Ledger
from flatshare.replay.wallclock import CUT, INTERRUPTED, WallClockOptions, run_wallclock
from flatshare.runfiles.records import schema_problems
from flatshare.workloads.model import Workload
from kit.fake_vllm import FakeServer
from kit.replay import by_id, session, workload

SLACK_S = 0.1  # how late a timer may fire on this shared 2-core machine (well under any pause here)
EARLY_S = 0.001  # how early (the event loop's clock resolution, rounding)
A = Endpoint("http://a:1", "fake")
B = Endpoint("http://b:2", "fake")


def _run(
    work: Workload,
    server: FakeServer | httpx.MockTransport,
    endpoints: tuple[Endpoint, ...] = (A,),
    **options: object,
) -> Ledger:
    ledger = Ledger()
    transport = server.transport() if isinstance(server, FakeServer) else server
    opts = WallClockOptions(**options)  # type: ignore[arg-type]
    asyncio.run(run_wallclock(work, endpoints, ledger, opts, transport=transport))
    for record in ledger.records.values():
        assert schema_problems(record.to_json()) == [], record
    return ledger


def test_every_request_is_recorded_with_every_token() -> None:
    work = workload(*(session(f"s{i}", 3, max_tokens=6) for i in range(3)))
    ledger = _run(work, FakeServer())
    assert set(ledger.records) == {r.id for r in work.requests()}
    for record in ledger.records.values():
        assert record.status == "ok" and record.finish_reason == "length"
        assert len(record.token_times_s) == 6 and record.end_s == record.token_times_s[-1]
        assert record.ttft_s is not None and 0.015 < record.ttft_s < 0.5
        assert record.engine == A.url
    assert ledger.counts()["ok"] == 9 and ledger.counts()["open"] == 0


def test_a_session_sends_its_next_request_after_the_reply_and_the_pause() -> None:
    work = workload(session("s", 3, pause_s=0.15, start_s=0.05))
    records = sorted(_run(work, FakeServer()).records.values(), key=lambda r: r.send_s)
    assert 0.05 - EARLY_S <= records[0].send_s < 0.05 + SLACK_S
    for prev, nxt in itertools.pairwise(records):
        assert prev.end_s is not None
        assert prev.end_s + 0.15 - EARLY_S <= nxt.send_s < prev.end_s + 0.15 + SLACK_S


def test_a_voice_session_waits_until_the_reply_has_been_spoken() -> None:
    voice = session(
        "v", 2, cls="voice", priority=0, max_tokens=10, first_sentence=3, speech_tokens_per_s=50, pause_s=0.1
    )
    first, second = sorted(_run(workload(voice), FakeServer()).records.values(), key=lambda r: r.send_s)
    assert first.first_sentence_s == first.token_times_s[2]
    spoken = first.first_sentence_s + 10 / 50  # speech starts at the first sentence, takes 0.2 s
    assert spoken + 0.1 - EARLY_S <= second.send_s < spoken + 0.1 + SLACK_S


def test_the_body_carries_the_workload_request() -> None:
    work = workload(session("s", 2, priority=7, max_tokens=4))
    server = FakeServer()
    _run(work, server)
    for request in work.requests():
        body = server.bodies[request.id]
        assert body["prompt"] == list(request.prompt_token_ids)
        assert (body["max_tokens"], body["priority"], body["model"]) == (4, 7, "fake")
        assert body["stream"] is True and body["ignore_eos"] is True and body["temperature"] == 0
        assert body["stream_options"] == STREAM_OPTIONS
    server = FakeServer()
    _run(work, server, send_priority=False)
    assert all("priority" not in body for body in server.bodies.values())


def test_concurrency_is_bounded_and_waits_are_counted() -> None:
    work = workload(*(session(f"s{i}", 2) for i in range(8)))
    server = FakeServer(ttft_s=0.05)
    ledger = _run(work, server, max_concurrency=3)
    assert server.max_in_flight == 3 and ledger.stats.max_in_flight == 3
    assert ledger.stats.slot_waits >= 5 and ledger.stats.max_slot_wait_s > 0.03
    assert ledger.counts()["ok"] == 16


def test_the_duration_stops_issuing_and_the_grace_period_cuts_the_rest() -> None:
    long_reply = session("long", 2, max_tokens=200)  # 200 tokens x 10 ms: still running at the cut
    queued = session("queued", 1, start_s=0.01)  # waits for the only slot
    late = session("late", 1, start_s=0.5)  # due after the duration: never issued
    server = FakeServer(itl_s=0.01)
    ledger = _run(workload(long_reply, queued, late), server, max_concurrency=1, duration_s=0.2, grace_s=0.2)
    records = by_id(ledger.sorted_records())
    assert set(records) == {"long/0", "queued/0"}
    cut = records["long/0"]
    assert (cut.status, cut.error) == ("failed", CUT)
    assert 10 < len(cut.token_times_s) < 200
    assert cut.end_s is not None and 0.4 - EARLY_S <= cut.end_s < 0.4 + SLACK_S  # cut at duration + grace
    assert records["queued/0"].error == f"{CUT}: {NEVER_SENT}"
    assert ledger.stats.cut == 2


def test_refusals_and_cut_streams_are_recorded_and_the_session_goes_on() -> None:
    work = workload(session("s", 2, max_tokens=5))
    refused = _run(work, FakeServer(status=503)).records
    assert [(r.status, r.error) for r in refused.values()] == [("refused", "HTTP 503: no room")] * 2
    cut = _run(work, FakeServer(cut_after=2)).records
    for record in cut.values():
        assert (record.status, record.error) == ("failed", "the stream ended without [DONE]")
        assert len(record.token_times_s) == 2


def test_a_connection_error_is_a_failed_request() -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("[Errno 111] Connection refused", request=request)

    ledger = _run(workload(session("s", 2)), httpx.MockTransport(refuse))
    assert [r.status for r in ledger.records.values()] == ["failed", "failed"]
    assert all("ConnectError" in (r.error or "") for r in ledger.records.values())
    assert ledger.samples == [] and ledger.stats.sample_errors[A.url] >= 1


def test_cancelling_the_run_closes_every_issued_request_as_interrupted() -> None:
    work = workload(session("a", 3, max_tokens=100), session("b", 1, start_s=5.0))
    ledger = Ledger()

    async def main() -> None:
        task = asyncio.create_task(run_wallclock(work, (A,), ledger, transport=FakeServer().transport()))
        await asyncio.wait_for(_until(lambda: any(r.token_times_s for r in ledger.records.values())), 10)
        await asyncio.sleep(0.05)  # a/0 is streaming
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    (record,) = ledger.records.values()  # only a/0 was due
    assert (record.id, record.status, record.error) == ("a/0", "failed", INTERRUPTED)
    assert 0 < len(record.token_times_s) < 100
    assert schema_problems(record.to_json()) == []


async def _until(condition: Callable[[], bool]) -> None:
    while not condition():
        await asyncio.sleep(0.01)


def test_metrics_are_sampled_from_every_endpoint() -> None:
    work = workload(*(session(f"s{i}", 1, max_tokens=60, start_s=0.0) for i in range(6)))
    ledger = _run(work, FakeServer(itl_s=0.01), endpoints=(A, B), sample_interval_s=0.1)
    engines = {engine for engine, _ in ledger.samples}
    assert engines == {A.url, B.url}
    assert all(s.kv_usage == 0.25 and s.preemptions_total == 3 for _, s in ledger.samples)
    assert len(ledger.samples) >= 6


def test_sessions_stick_to_one_endpoint() -> None:
    work = workload(*(session(f"agent/{i}", 2) for i in range(6)))
    ledger = _run(work, FakeServer(), endpoints=(A, B))
    for record in ledger.records.values():
        assert record.engine == (A, B)[sticky_index(record.session_id, 2)].url
    assert {r.engine for r in ledger.records.values()} == {A.url, B.url}


@pytest.mark.parametrize(
    "options", [{"max_concurrency": 0}, {"duration_s": 0}, {"grace_s": -1}, {"read_timeout_s": 0}]
)
def test_bad_options_are_refused(options: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        WallClockOptions(**options)  # type: ignore[arg-type]


def test_a_server_that_goes_silent_times_out_as_failed() -> None:
    work = workload(session("s", 2))
    ledger = Ledger()

    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read(65536)  # take the request, never answer
        await asyncio.sleep(5)
        writer.close()

    async def main() -> None:
        server = await asyncio.start_server(silent, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        async with server:
            options = WallClockOptions(read_timeout_s=0.2, sample_interval_s=10)
            await run_wallclock(work, [Endpoint(f"http://127.0.0.1:{port}", "x")], ledger, options)

    asyncio.run(main())
    records = ledger.sorted_records()
    assert [(r.status, r.error) for r in records] == [("failed", "timeout (ReadTimeout)")] * 2
    assert all(r.end_s is not None and 0.2 <= r.end_s - r.send_s < 0.2 + SLACK_S for r in records)
