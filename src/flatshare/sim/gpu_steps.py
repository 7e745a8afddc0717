"""Whole-step GPU measurements made by flatshare (`benchmarks/gpu_step_costs.py`), and what they say about
the step models.

The file holds, for one card and a Llama-3-8B-shaped model (all layers, bf16, CUDA graphs): the linear work
of passes of 1-8,192 tokens, decode attention (b decodes over c tokens of KV each), prefill attention (a
chunk of n tokens after p earlier ones) and whole mixed steps. This module reads it, fits the attention
coefficients of the step model to it (a decode's cost per context token, a prefill's cost per (query, key)
pair: least squares through the origin, the form `StepTimeProfile` prices), and prices every whole step under
a profile to compare with what the card did. Pure functions; the tool `tools/gpu_steps.py` writes the results.
"""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flatshare.errors import InputError
from flatshare.sim.measured import Card, Measured, Shape
from flatshare.sim.profile import ScheduledWork, StepTimeProfile


@dataclass(frozen=True)
class StepRow:
    """One measured whole step: `decodes` at `decode_ctx`, `voice` decodes at `voice_ctx`, a prefill chunk
    of `chunk` tokens after `chunk_ctx`; `seconds` the median over the replays."""

    decodes: int
    decode_ctx: int
    chunk: int
    chunk_ctx: int
    voice: int
    voice_ctx: int
    seconds: float

    def work(self) -> list[ScheduledWork]:
        items = [ScheduledWork(1, self.decode_ctx, True)] * self.decodes
        items += [ScheduledWork(1, self.voice_ctx, True)] * self.voice
        if self.chunk:
            items.append(ScheduledWork(self.chunk, self.chunk_ctx, False))
        return items

    @property
    def label(self) -> str:
        parts = []
        if self.decodes:
            parts.append(f"{self.decodes} decodes at {self.decode_ctx // 1024}k")
        if self.voice:
            parts.append(f"{self.voice} voice decode at {self.voice_ctx // 1024}k")
        if self.chunk:
            parts.append(f"{self.chunk}-token chunk after {self.chunk_ctx // 1024}k")
        return " + ".join(parts)


@dataclass(frozen=True)
class StepsFile:
    """The measurement file, read and checked."""

    info: dict[str, Any]
    linear: tuple[tuple[int, float], ...]
    decode: tuple[tuple[int, int, float], ...]  # decodes, context, seconds
    prefill: tuple[tuple[int, int, float], ...]  # chunk, earlier context, seconds
    steps: tuple[StepRow, ...]

    @property
    def shape(self) -> Shape:
        s = self.info["shape"]
        return Shape(s["hidden"], s["intermediate"], s["heads"], s["kv_heads"])

    @property
    def layers(self) -> int:
        return int(self.info["shape"]["layers"])

    def measured(self, card: Card, max_tokens: int = 4096) -> Measured:
        """The linear rows up to `max_tokens`, as `flatshare.sim.linear_fit` fits them."""
        rows = [(n, s) for n, s in self.linear if n <= max_tokens]
        return Measured(card, self.shape, tuple(n for n, _ in rows), tuple(s for _, s in rows))


def read_steps(path: Path) -> StepsFile:
    """InputError when the file is missing or not a measurement of `benchmarks/gpu_step_costs.py`."""
    try:
        data = json.loads(path.read_text())
        return StepsFile(
            info=dict(data["info"]),
            linear=tuple((int(r["tokens"]), float(r["seconds"])) for r in data["linear"]),
            decode=tuple(
                (int(r["decodes"]), int(r["context"]), float(r["seconds"])) for r in data["decode_attention"]
            ),
            prefill=tuple(
                (int(r["chunk"]), int(r["context"]), float(r["seconds"])) for r in data["prefill_attention"]
            ),
            steps=tuple(
                StepRow(
                    decodes=int(r["decodes"]),
                    decode_ctx=int(r["decode_ctx"]),
                    chunk=int(r["chunk"]),
                    chunk_ctx=int(r["chunk_ctx"]),
                    voice=int(r["voice"]),
                    voice_ctx=int(r["voice_ctx"]),
                    seconds=float(r["seconds"]),
                )
                for r in data["steps"]
            ),
        )
    except FileNotFoundError as exc:
        raise InputError(f"measurement not found: {path}") from exc
    except (KeyError, TypeError, ValueError) as exc:
        raise InputError(f"{path}: not a gpu_step_costs measurement ({exc})") from exc


def pairs(chunk: int, context: int) -> float:
    """(query, key) pairs of a causal chunk after `context` tokens, as `StepTimeProfile` counts them."""
    return chunk * (context + chunk / 2)


def through_origin(xs: list[float], ys: list[float]) -> float:
    """The least-squares slope of y = k x (relative errors weighted alike: each point divided by its y)."""
    num = sum(x / y for x, y in zip(xs, ys, strict=True))
    den = sum((x / y) ** 2 for x, y in zip(xs, ys, strict=True))
    return num / den


@dataclass(frozen=True)
class AttentionFit:
    decode_ctx_token_s: float
    prefill_attn_pair_s: float
    decode_errors: tuple[float, ...]
    prefill_errors: tuple[float, ...]


def fit_attention(m: StepsFile) -> AttentionFit:
    """Both coefficients fitted to every measured attention row (relative least squares)."""
    dx = [float(b * c) for b, c, _ in m.decode]
    dy = [s for _, _, s in m.decode]
    px = [pairs(n, p) for n, p, _ in m.prefill]
    py = [s for _, _, s in m.prefill]
    kd, kp = through_origin(dx, dy), through_origin(px, py)
    return AttentionFit(
        kd,
        kp,
        tuple(kd * x / y - 1 for x, y in zip(dx, dy, strict=True)),
        tuple(kp * x / y - 1 for x, y in zip(px, py, strict=True)),
    )


def priced(profile: StepTimeProfile, row: StepRow) -> float:
    """The profile's seconds for a measured step, without its fixed cost (the LM head, sampling and the host
    are not in the measurement)."""
    parts = profile.step_parts(row.work())
    return parts.total_s - parts.fixed_s


def median_abs(errors: list[float] | tuple[float, ...]) -> float:
    return statistics.median(abs(e) for e in errors)
