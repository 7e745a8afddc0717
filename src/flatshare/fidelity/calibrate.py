"""Calibration probes against a running vLLM server, and the profile fitted to them.

The probes (each repeated `repeats` times; the median counts), all with unique random prompts:
- `prefill`: one request of L prompt tokens and `max_tokens=1` alone; measured: its time to first token.
- `decode`: B requests of C prompt tokens and M output tokens (`ignore_eos`) streamed together;
  measured: the mean inter-token latency of the probe, from the server's `vllm:inter_token_latency_
  seconds` histogram (its sum and count before and after), priced as one decode step of B requests at
  context C + M/2. Not the gaps the client sees: vLLM's API server forwards tokens in bursts when it
  falls behind (on two shared cores the median gap a client saw was ~0 ms while the engine took ~2.4 ms
  a step), so client-side gaps measure the API server, not the engine. The client-side mean gap and
  the whole-stream time (send to last token) are kept in `detail` as a cross-check.
- `prefill+decode`: L prompt tokens (`max_tokens=1`) sent while B requests decode; measured: its TTFT.
- KV capacity: `vllm:cache_config_info` (num_gpu_blocks x block_size), checked by filling: requests
  whose prompts and outputs need 95% of the blocks must run without preemption, and requests that
  need 110% must be preempted (or wait). The fill also clears the prefix cache of anything sent before.
"""

from __future__ import annotations

import asyncio
import math
import random
import statistics
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import httpx

from flatshare.fidelity.fit import Probe
from flatshare.fidelity.probes import ServerInfo, histogram, metric, scrape, stream_completion, unique_prompt
from flatshare.fidelity.settings import PROBE_VOCAB_SIZE
from flatshare.fidelity.work import Step, beside_steps, decode_step, prefill_steps
from flatshare.sim.config import DEFAULT_ENGINE

ITL = "vllm:inter_token_latency_seconds"


@dataclass(frozen=True)
class CalibrationPlan:
    """Which probes to run. Lengths beyond the server's `max_model_len` (or KV) are clipped or dropped."""

    max_num_batched_tokens: int = DEFAULT_ENGINE.max_num_batched_tokens
    vocab_size: int = PROBE_VOCAB_SIZE
    prefill_lengths: tuple[int, ...] = (32, 256, 512, 1024, 2000)
    decode_batches: tuple[int, ...] = (1, 4, 8)
    decode_contexts: tuple[int, ...] = (64, 1024)
    decode_tokens: int = 96
    beside_lengths: tuple[int, ...] = (512, 1536)
    beside_batch: int = 4
    repeats: int = 5
    seed: int = 0

    def __post_init__(self) -> None:
        if self.repeats < 1 or self.decode_tokens < 8 or self.max_num_batched_tokens < 2:
            raise ValueError("repeats >= 1, decode_tokens >= 8 and max_num_batched_tokens >= 2 needed")
        if self.beside_batch >= self.max_num_batched_tokens:
            raise ValueError("beside_batch must leave room for prefill in max_num_batched_tokens")


Progress = Callable[[str], None]


Measure = Callable[[], Awaitable[tuple[float, dict[str, float]]]]


@dataclass(frozen=True)
class _Spec:
    """A probe before it is measured: its work layout and how to measure it once."""

    name: str
    kind: str
    steps: list[Step]
    weights: list[float]
    once: Measure
    client_timed: bool = True

    def probe(self, results: list[tuple[float, dict[str, float]]]) -> Probe:
        detail = {k: round(statistics.median(d[k] for _, d in results), 6) for k in results[0][1]}
        samples = tuple(v for v, _ in results)
        steps, weights = tuple(self.steps), tuple(self.weights)
        return Probe(self.name, self.kind, steps, weights, samples, detail, self.client_timed)


class _Prober:
    def __init__(self, client: httpx.AsyncClient, info: ServerInfo, plan: CalibrationPlan) -> None:
        self.client, self.info, self.plan = client, info, plan
        self.rng = random.Random(plan.seed)
        self.budget = plan.max_num_batched_tokens

    def prompt(self, n: int) -> list[int]:
        return unique_prompt(self.rng, n, self.plan.vocab_size)

    def prefill(self, length: int) -> _Spec:
        async def once() -> tuple[float, dict[str, float]]:
            streamed = await stream_completion(self.client, self.info, self.prompt(length), 1)
            return streamed.ttft_s, {}

        steps = prefill_steps([length], self.budget)
        return _Spec(f"prefill L={length}", "prefill", steps, [1.0] * len(steps), once)

    def decode(self, batch: int, context: int) -> _Spec:
        m = self.plan.decode_tokens

        async def once() -> tuple[float, dict[str, float]]:
            before = histogram(await scrape(self.client, self.info.url), ITL)
            streams = await asyncio.gather(
                *(stream_completion(self.client, self.info, self.prompt(context), m) for _ in range(batch))
            )
            after = histogram(await scrape(self.client, self.info.url), ITL)
            gaps = [s.steady_gap_s(s.token_times_s[0], s.token_times_s[-1]) for s in streams]
            client_gap = statistics.median(g[0] if g else 0.0 for g in gaps)
            whole = max(s.token_times_s[-1] for s in streams) - min(s.send_s for s in streams)
            server_gap = (after[0] - before[0]) / max(1.0, after[1] - before[1])
            return server_gap, {"client_mean_gap_s": client_gap, "client_stream_s": whole}

        steps = [decode_step(batch, context + m // 2)]
        return _Spec(f"decode B={batch} C={context} M={m}", "decode", steps, [1.0], once, client_timed=False)

    def beside(self, length: int) -> _Spec:
        batch, context, lead = self.plan.beside_batch, 64, 8
        steps, weights = beside_steps(length, batch, context + lead, self.budget)
        background_tokens = lead + 4 * len(steps) + 64

        async def once() -> tuple[float, dict[str, float]]:
            tasks = [
                asyncio.create_task(
                    stream_completion(self.client, self.info, self.prompt(context), background_tokens)
                )
                for _ in range(batch)
            ]
            await self._wait_tokens(lead)
            probe = await stream_completion(self.client, self.info, self.prompt(length), 1)
            background = await asyncio.gather(*tasks)
            overlapped = all(s.token_times_s[-1] > probe.token_times_s[0] for s in background)
            return probe.ttft_s, {"decodes_outlasted_it": float(overlapped)}

        name = f"prefill L={length} beside {batch} decodes"
        return _Spec(name, "prefill+decode", steps, weights, once)

    async def _wait_tokens(self, tokens: int) -> None:
        """Wait until the server has generated about `tokens` tokens for each background request."""
        text = await scrape(self.client, self.info.url)
        goal = (metric(text, "vllm:generation_tokens_total") or 0.0) + tokens * self.plan.beside_batch
        for _ in range(400):
            text = await scrape(self.client, self.info.url)
            if (metric(text, "vllm:generation_tokens_total") or 0.0) >= goal:
                return
            await asyncio.sleep(0.005)

    def specs(self) -> list[_Spec]:
        """Every probe of the plan that fits the server (clipped to max_model_len and the KV cache)."""
        plan, info = self.plan, self.info
        longest, room = info.max_model_len - 1, int(0.85 * info.usable_kv_tokens)
        out = [self.prefill(n) for n in sorted({min(n, longest) for n in plan.prefill_lengths})]
        for batch in plan.decode_batches:
            for context in plan.decode_contexts:
                fits = min(context, longest - plan.decode_tokens, room // batch - plan.decode_tokens)
                if fits >= 16:
                    out.append(self.decode(batch, fits))
        for length in plan.beside_lengths:
            fits = min(length, longest, room - plan.beside_batch * 256)
            if fits >= 16:
                out.append(self.beside(fits))
        return out


async def run_probes(
    client: httpx.AsyncClient, info: ServerInfo, plan: CalibrationPlan, progress: Progress | None = None
) -> list[Probe]:
    """Every probe of `plan` that fits the server, measured in `plan.repeats` rounds (each round runs
    every probe once, so a change in the machine's load over time spreads over all probes)."""
    specs = _Prober(client, info, plan).specs()
    results: list[list[tuple[float, dict[str, float]]]] = [[] for _ in specs]
    for round_ in range(plan.repeats):
        for spec, got in zip(specs, results, strict=True):
            if progress is not None:
                progress(f"round {round_ + 1}/{plan.repeats}: {spec.name}")
            got.append(await spec.once())
    return [spec.probe(got) for spec, got in zip(specs, results, strict=True)]


async def check_kv(client: httpx.AsyncClient, info: ServerInfo, plan: CalibrationPlan) -> dict[str, Any]:
    """Check the KV capacity by filling it: to 95% of its blocks (no preemption allowed), then to 110%
    (some request must be preempted or wait). Counters decide, not polled gauges: a busy API server
    answers /metrics late, so a poll may miss the peak (`max_usage` is kept for the record only)."""
    rng = random.Random(plan.seed + 1)
    out: dict[str, Any] = {"num_gpu_blocks": info.num_gpu_blocks, "block_size": info.block_size}
    out["fill_95"] = under = await _fill(client, info, plan, rng, 0.95)
    out["fill_110"] = over = await _fill(client, info, plan, rng, 1.10)
    out["ok"] = bool(
        under["expected_usage_end"] <= 1.0 < over["expected_usage_end"]
        and under["preemptions"] == 0
        and (over["preemptions"] > 0 or over["max_waiting"] > 0)
    )
    return out


async def _fill(
    client: httpx.AsyncClient, info: ServerInfo, plan: CalibrationPlan, rng: random.Random, share: float
) -> dict[str, Any]:
    out_tokens = min(256, info.max_model_len // 4)  # long enough for /metrics polls to see the peak
    need = share * info.usable_kv_tokens
    per = info.max_model_len - out_tokens
    n = max(2, math.ceil(need / per))
    prompt = int(need / n) - out_tokens
    before = await scrape(client, info.url)
    tasks = [
        asyncio.create_task(
            stream_completion(client, info, unique_prompt(rng, prompt, plan.vocab_size), out_tokens)
        )
        for _ in range(n)
    ]
    usage, waiting = 0.0, 0.0
    while not all(t.done() for t in tasks):
        text = await scrape(client, info.url)
        usage = max(usage, metric(text, "vllm:kv_cache_usage_perc") or 0.0)
        waiting = max(waiting, metric(text, "vllm:num_requests_waiting") or 0.0)
        await asyncio.sleep(0.01)
    await asyncio.gather(*tasks)
    after = await scrape(client, info.url)
    preempted = (metric(after, "vllm:num_preemptions_total") or 0) - (
        metric(before, "vllm:num_preemptions_total") or 0
    )
    usable_blocks = info.num_gpu_blocks - 1
    return {
        "requests": n,
        "prompt_tokens": prompt,
        "max_tokens": out_tokens,
        "expected_usage_prompts": round(n * math.ceil(prompt / info.block_size) / usable_blocks, 4),
        "expected_usage_end": round(
            n * math.ceil((prompt + out_tokens) / info.block_size) / usable_blocks, 4
        ),
        "max_usage": round(usage, 4),
        "max_waiting": waiting,
        "preemptions": round(preempted),
    }
