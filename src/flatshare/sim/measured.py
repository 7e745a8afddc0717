"""Measured linear-work timings of real GPUs, read by path from `../shared/gpu-profiles/` (never copied).

The files are vidur's public profiling data (Microsoft, MIT licence; `gpu-profiles/README.md` beside
them): per forward pass of `num_tokens` tokens and tensor-parallel degree, the time of every
token-parallel operation of one transformer layer, in milliseconds. A pass's linear work is the sum of
the operations' medians at TP 1, times the model's layer count.
"""

from __future__ import annotations

import csv
import os
import statistics
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from flatshare.errors import InputError

SHARED_ENV = "FLATSHARE_SHARED"
MAX_TOKENS = 4096  # every file covers 1-4,096 tokens a pass (the A100's goes on to 32,768)


@dataclass(frozen=True)
class Card:
    """One measured GPU and model: the profile fitted to it, its file under `gpu-profiles/`, its layers,
    and the card's spec-sheet peaks (dense bf16 tensor FLOP/s, memory bytes/s)."""

    profile: str
    path: str
    gpu: str
    model: str
    layers: int
    peak_flops_per_s: float
    peak_mem_bytes_per_s: float


CARDS = (
    Card(
        "a100-llama3-8b",
        "vidur/a100/meta-llama/Meta-Llama-3-8B/mlp.csv",
        "A100 80 GB (SXM4: 2,039 GB/s HBM2e, 312 TFLOP/s dense bf16)",
        "Llama-3-8B",
        32,
        312e12,
        2039e9,
    ),
    Card(
        "a40-llama2-7b",
        "vidur/a40/meta-llama/Llama-2-7b-hf/mlp.csv",
        "A40 48 GB (696 GB/s GDDR6, 149.7 TFLOP/s dense bf16)",
        "Llama-2-7B",
        32,
        149.7e12,
        696e9,
    ),
    Card(
        "h100-llama2-7b",
        "vidur/h100/meta-llama/Llama-2-7b-hf/mlp.csv",
        "H100 80 GB (SXM5: 3,350 GB/s HBM3, 989 TFLOP/s dense bf16)",
        "Llama-2-7B",
        32,
        989e12,
        3350e9,
    ),
)


@dataclass(frozen=True)
class Shape:
    """A dense transformer's shape as the file records it, and what its linear layers hold."""

    hidden: int
    intermediate: int
    heads: int
    kv_heads: int

    @property
    def layer_params(self) -> int:
        """Weights of one layer's projections: QKV, output, gated MLP up (two) and down."""
        head_dim = self.hidden // self.heads
        qkv = self.hidden * (self.hidden + 2 * self.kv_heads * head_dim)
        return qkv + self.hidden * self.hidden + 3 * self.hidden * self.intermediate


@dataclass(frozen=True)
class Measured:
    """One card's measured linear work per pass: `seconds[i]` for a pass of `tokens[i]` tokens (all
    layers; a token count measured twice takes the median of the two)."""

    card: Card
    shape: Shape
    tokens: tuple[int, ...]
    seconds: tuple[float, ...]


def shared_dir() -> Path:
    """`../shared` beside the checkout (or `$FLATSHARE_SHARED`)."""
    if os.environ.get(SHARED_ENV):
        return Path(os.environ[SHARED_ENV])
    return Path(__file__).resolve().parents[3].parent / "shared"


def card(profile: str) -> Card:
    for c in CARDS:
        if c.profile == profile:
            return c
    raise InputError(f"no measured card for profile {profile!r} ({', '.join(c.profile for c in CARDS)})")


def read_measured(c: Card, root: Path | None = None, max_tokens: int = MAX_TOKENS) -> Measured:
    """The card's linear work per pass at TP 1, 1 to `max_tokens` tokens. InputError when the file is
    missing or malformed."""
    path = (root or shared_dir() / "gpu-profiles") / c.path
    if not path.is_file():
        raise InputError(f"measured timings not found: {path}")
    with path.open(newline="") as f:
        rows = list(csv.DictReader(f))
    if not rows:
        raise InputError(f"{path}: no rows")
    medians = [col for col in rows[0] if col.startswith("time_stats.") and col.endswith(".median")]
    samples: dict[int, list[float]] = defaultdict(list)
    try:
        for row in rows:
            n = int(row["num_tokens"])
            if int(row["num_tensor_parallel_workers"]) == 1 and n <= max_tokens:
                samples[n].append(sum(float(row[col]) for col in medians) * 1e-3 * c.layers)
        first = rows[0]
        shape = Shape(
            int(first["n_embd"]), int(first["n_expanded_embd"]), int(first["n_head"]), int(first["n_kv_head"])
        )
    except (KeyError, ValueError) as exc:
        raise InputError(f"{path}: {exc}") from exc
    tokens = tuple(sorted(samples))
    return Measured(c, shape, tokens, tuple(statistics.median(samples[n]) for n in tokens))
