"""The co-location experiment's engine and workload setup, and the `seed` preset: the write-up's setup.

The seed (`shared/seeds/000`) states: a voice agent taking 2 calls (later rounds 4 and 6) beside 24 replayed
Claude Code sessions, one small model on a single 24 GB consumer card, vLLM tuned "the way an operator would
tune it" with the voice agent at the highest priority, vLLM's CPU tier on ("vLLM's CPU tier already holds a
copy of its KV"), 512 tokens a step (later 256), failed turns counted as 30 s. Everything else it leaves
unstated; `UNSTATED` lists each such parameter with the value the preset takes, why, and how it was chosen:
`fitted` on the stock-vLLM rows of the seed's table only (`tools/seed_fit.py`, its grid and losses in
docs/results/colocation/seed-fit.md), `calibrated` (set to match one row of the seed's table, which is then
labelled calibrated or is already fitted), or `no` (stated, taken from vLLM's default, or a workload
choice). The seed table's rows say which are fitted, calibrated or predictions
(`flatshare.colocation.seed_table.RowKind`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Literal

from flatshare.listen.voice import VoicePipeline
from flatshare.scaling import check_scale, scaled

AGENT_SOURCES = ("synthetic", "weka")


@dataclass(frozen=True)
class Setup:
    """What every condition of one co-location experiment shares (conditions change the scheduler).

    `max_model_len`: agent contexts compact before it (vLLM's --max-model-len). `kv_tokens`: the GPU's KV
    cache in tokens (None: the profile's). `cpu_tier_tokens`: vLLM's CPU KV tier (--kv-offloading-size, in
    tokens; 0: off). `reserve_full_isl`: vLLM 0.32's admission rule (the whole prompt must fit; False: the
    first chunk). `api_latency_s`: one pass through vLLM's API server (None: the profile's). `agent_source`:
    `synthetic` (generated from the WEKA sample's distributions) or `weka` (the sample's own sessions).
    `voice_system_tokens`: the voice agent's system prompt (instructions, persona, tools), shared by every
    turn of every call; each turn adds the call's dialogue so far. `async_scheduling`: vLLM schedules each
    step while the previous one runs (--[no-]async-scheduling; vLLM 0.32 turns it on by default on one GPU,
    `VllmConfig.__post_init__`, unless an incompatible option is set); False: synchronous steps.
    `long_prefill_token_threshold`: vLLM's per-step cap on one request's prefill chunk
    (--long-prefill-token-threshold; 0, vLLM's default, is no cap): under a cap, several prefills share a
    step's token budget. `scale`: every token count of the workload and of the engine's token capacities
    (`max_model_len`, `kv_tokens`, `cpu_tier_tokens`) times this factor in (0, 1]
    (`flatshare.workloads.scale`), so the same experiment fits a small model or a CPU; the step budget
    (`max_num_batched_tokens`) and the schedulers' settings are not scaled.
    `voice_warmup`: before the measured window, the engine serves the voice agent's system prompt once
    (`max_tokens` 1), in every condition alike (`alone` and `agents-alone` included), as an operator's
    `flatshare warmup` does at server start: no condition's first turn computes the prompt cold. False (how
    runs recorded before this field ran): the first turn of every run prefills it.
    `asr_final_spread`: the voice recogniser's final-transcript delay varies from turn to turn, lognormal
    with this sigma around the pipeline's 0.3 s (`flatshare.listen.voice.VoicePipeline`); 0 (the preset):
    constant. Left out of `to_json` at 0, as runs recorded before it were.
    """

    profile: str = "llama3-8b-24gb"
    max_model_len: int = 16384
    kv_tokens: int | None = None
    cpu_tier_tokens: int = 0
    reserve_full_isl: bool = True
    api_latency_s: float | None = None
    agent_source: str = "synthetic"
    voice_system_tokens: int = 600
    async_scheduling: bool = True
    long_prefill_token_threshold: int = 0
    voice_warmup: bool = False
    scale: float = 1.0
    asr_final_spread: float = 0.0

    def __post_init__(self) -> None:
        check_scale(self.scale)
        if self.max_model_len <= 0 or self.cpu_tier_tokens < 0:
            raise ValueError("setup: max_model_len must be > 0 and cpu_tier_tokens >= 0")
        if self.kv_tokens is not None and self.kv_tokens <= 0:
            raise ValueError("setup: kv_tokens must be > 0")
        if self.api_latency_s is not None and not 0 <= self.api_latency_s < 10:
            raise ValueError("setup: api_latency_s must be in [0, 10) seconds")
        if self.long_prefill_token_threshold < 0:
            raise ValueError("setup: long_prefill_token_threshold must be >= 0 (0: no cap)")
        if self.voice_system_tokens < 1:
            raise ValueError("setup: voice_system_tokens must be >= 1")
        VoicePipeline(asr_final_spread=self.asr_final_spread)  # checks it
        if self.agent_source not in AGENT_SOURCES:
            raise ValueError(f"setup: agent_source must be one of {AGENT_SOURCES}, got {self.agent_source!r}")

    def kv_cache_tokens(self) -> int:
        """The GPU's KV cache in tokens: `kv_tokens`, or the profile's own when it is None."""
        from flatshare.sim.profile import load_profile

        return self.kv_tokens or load_profile(self.profile).default_kv_tokens

    def scaled(self, tokens: int) -> int:
        """A token count of the unscaled setup, scaled by `scale`."""
        return scaled(tokens, self.scale)

    def with_changes(self, **changes: Any) -> Setup:
        return dataclasses.replace(self, **changes)

    def voice_pipeline(self) -> VoicePipeline:
        """The voice pipeline outside the engine (its recogniser's spread is the setup's)."""
        return VoicePipeline(asr_final_spread=self.asr_final_spread)

    def to_json(self) -> dict[str, Any]:
        facts = dataclasses.asdict(self)
        if not self.asr_final_spread:
            del facts["asr_final_spread"]
        return facts


@dataclass(frozen=True)
class Unstated:
    """A parameter the seed's text does not state: the preset's value, the range considered, why, and how
    it was chosen (`fitted`, `calibrated` or `no`, the module docstring)."""

    name: str
    value: str
    considered: str
    why: str
    chosen: Literal["fitted", "calibrated", "no"] = "no"


SEED = Setup(
    max_model_len=16384,
    kv_tokens=45056,
    cpu_tier_tokens=65536,
    reserve_full_isl=False,
    api_latency_s=0.06,
    voice_system_tokens=4000,
    voice_warmup=False,  # the committed results ran cold; warm-up joins the preset with its refit
)

UNSTATED = (
    Unstated(
        "model and card",
        "llama3-8b-24gb profile (8B dense, fp16, RTX 4090 class)",
        "-",
        "'one small model on a single consumer card'; 'recomputing a 16,000-token context takes more than "
        "three seconds' and 'finding it still cached takes a tenth of one' are the profile's sources. Its "
        "time per decoded token is pinned to the seed's 16-20 ms, so the voice-alone first-sentence decode "
        "row is calibrated, not a prediction.",
        chosen="calibrated",
    ),
    Unstated(
        "KV cache size",
        "45,056 tokens (5.5 GiB at 128 KiB a token)",
        "40,960 to 49,152 tokens (5 to 6 GiB)",
        "the seed names the card, not vLLM's --gpu-memory-utilization. An 8B model in fp16 loads 14.99 GiB "
        "of a 24 GB card's 23.58 GiB (Llama-3.1-8B on an RTX 3090, vLLM issue #10517); at vLLM's default "
        "0.90, less non-torch memory (0.35 GiB), peak activation and CUDA-graph memory (counted since vLLM "
        "0.21), ~5 GiB remain (the profile's 40,960 tokens), and an operator raising it to 0.95 gets ~1.2 "
        "GiB more; 'two or three of those [16k] contexts fill the cache' caps it at 49,152. Fitted jointly "
        "with the CPU tier (seed-fit-kv.md, refined at 20 seeds in seed-fit-kv-refined.md).",
        chosen="fitted",
    ),
    Unstated(
        "vLLM's admission rule",
        "first chunk must fit (vLLM before PR #37307; 0.32 defaults to the whole prompt)",
        "whole prompt / first chunk",
        "the seed names no vLLM version, and the rule changed in 2026-03 (PR #37307). The fit prefers the "
        "older rule; the sensitivity table shows the other.",
        chosen="fitted",
    ),
    Unstated(
        "max model length",
        "16,384",
        "16,384 / 32,768",
        "agents 'often' resend 'more than ten thousand tokens' and a '16,000-token context' is the seed's "
        "example; two or three such contexts fill a 24 GB card's cache.",
        chosen="fitted",
    ),
    Unstated(
        "CPU tier size",
        "65,536 tokens (8 GiB of host memory at 128 KiB a token)",
        "1 to 32 GiB (8,192 to 262,144 tokens)",
        "the seed runs vLLM's CPU tier but not its size (`--kv-offloading-size` is the operator's choice, "
        "in GiB). The grid first tried 8 and 32 GiB; the tier axis alone at the profile's KV cache (10 "
        "seeds x 600 s) put 3 GiB first and 8 GiB second; fitted jointly with the KV cache (2, 3, 4 and "
        "8 GiB against five KV sizes, then the best four at 20 seeds), 8 GiB with 45,056 KV tokens first.",
        chosen="fitted",
    ),
    Unstated(
        "API server pass",
        "0.06 s",
        "0 / 0.03 / 0.06 / 0.09 s",
        "a pass through vLLM's API server. The fit ranked 0.03 s first (loss 3.04 against 3.43 at 0.06 s, "
        "5 seeds x 600 s, seed-fit-refined.md), flat within the seeds' noise; 0.06 s was kept to match the "
        "seed's voice-alone first-token wait (0.09 s), so that row is calibrated, not a prediction.",
        chosen="calibrated",
    ),
    Unstated(
        "voice agent's system prompt",
        "4,000 tokens (instructions, persona, tools), shared by every turn of every call",
        "600 / 2,000 / 4,000 tokens",
        "the seed says only that the voice agent's 'requests are small' (beside agents' 10k-90k); 4,000 is "
        "the largest value tried, and the fit's best.",
        chosen="fitted",
    ),
    Unstated(
        "scheduling mode",
        "asynchronous (vLLM 0.32's default)",
        "asynchronous / synchronous",
        "the seed tunes vLLM 'the way an operator would' and names no scheduling option; vLLM 0.32 turns "
        "async scheduling on by default on one GPU (`VllmConfig.__post_init__`). Not fitted: the preset "
        "takes vLLM's default; the sensitivity table shows synchronous steps.",
    ),
    Unstated(
        "per-request prefill cap",
        "none (vLLM's default, --long-prefill-token-threshold 0)",
        "0 / 128 / 256",
        "the seed names no such option. Its 'beside three long agent prefills' could read as three prefills "
        "in one step, which vLLM's v1 scheduler does only under a cap (without one, the first prefilling "
        "request takes the whole budget left). Fitted at the preset's other values (10 seeds x 600 s, "
        "seed-fit-prefill-cap.md): no cap first (loss 0.28), 256 a close second (0.28), 128 third (0.44).",
        chosen="fitted",
    ),
    Unstated(
        "warm-up",
        "off: the first turn of every run prefills the voice prompt cold (`--voice-warmup` serves it once "
        "before the window, in every condition)",
        "cold / warmed",
        "a production voice agent's server has served its system prompt long before a measured call, and a "
        "cold first turn prefills all of it (0.55-0.66 s) in every run and condition, alone included; the "
        "write-up does not say. The preset's fit and committed results ran cold; warmed, alone's p95 and "
        "so a fitted row move, so warm-up joins the preset when it is refitted with it.",
    ),
    Unstated(
        "voice calls",
        "10 turns a call, callers speak ~3 s a turn; replies median 23 tokens (first sentence 15, <= 39)",
        "-",
        "reply lengths are the seed's; call length and speech are not stated.",
    ),
    Unstated(
        "agent sessions",
        "generated from the WEKA Claude Code sample's distributions, compacting at the max model length",
        "synthetic / the sample's sessions replayed",
        "the seed replays 'public Claude Code traces, pauses included'; the sample is the public trace here.",
    ),
    Unstated(
        "voice pipeline outside the engine",
        "1.25 s (end of speech 0.6 + final transcript 0.3 + first audio 0.35)",
        "-",
        "chosen before this preset so that the voice agent alone lands near the seed's 1.8 s p95 (a fitted "
        "row); turn rows of the seed table are judged on engine time, the turn less these 1.25 s.",
        chosen="calibrated",
    ),
)


def _as_setup(setup: dict[str, Any]) -> Setup | None:
    """A run's recorded setup; a field it lacks postdates the run, which ran at that field's default."""
    try:
        return Setup(**setup)
    except (TypeError, ValueError):
        return None


def unstated_lines(setup: dict[str, Any]) -> list[str]:
    """The run's setup as a markdown list, and the unstated parameters' table when it is the seed preset."""
    lines = ["Setup: " + ", ".join(f"`{k}` {v}" for k, v in sorted(setup.items())) + "."]
    ran = _as_setup(setup)
    if ran is not None and ran != SEED and ran.with_changes(profile=SEED.profile) == SEED:
        return [
            *lines,
            "",
            f"The write-up's preset under another step model (`{ran.profile}`): its unstated parameters were "
            f"fitted under `{SEED.profile}`, so here every row, the fitted ones included, is that model's "
            "prediction (`flatshare compare` sets two such runs side by side).",
        ]
    if ran != SEED:
        return [
            *lines,
            "",
            "This is not the seed preset: the seed table's fitted rows were fitted on another setup.",
        ]
    lines += [
        "",
        "The seed preset. Parameters the seed does not state:",
        "",
        "| parameter | value | considered | why | fitted or calibrated |",
        "|---|---|---|---|---|",
    ]
    lines += [f"| {u.name} | {u.value} | {u.considered} | {u.why} | {u.chosen} |" for u in UNSTATED]
    return lines
