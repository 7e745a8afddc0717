"""The token-parallel (linear) work of one forward pass, priced from the card's memory and compute.

A pass of `n` tokens (prefill tokens plus one per decoding request) runs every weight matrix once. Its
linear work (projections, MLP, norms, activations, residual adds) takes

    memory_s  = (weight_bytes + act_bytes_per_token * n) / mem_bytes_per_s
    compute_s = flops_per_token * padded(n) / flops_per_s
    linear_s  = (memory_s ** knee + compute_s ** knee) ** (1 / knee)

`memory_s` is reading the weights once (the same for 1 token or 100: a decode batch is memory-bound) plus
the activations each token moves; `compute_s` is the matrix multiplies. The p-norm is a smooth maximum:
far from the ridge point it is the larger of the two; at the ridge both overlap partly (knee 1 would add
them, a large knee is a hard roofline). `padded(n)` rounds the pass up to the GEMM kernels' tiles: a
kernel computes whole tiles of rows, so 136 tokens cost what 192 or 256 do. Each `TileRule` pads to a
multiple of `tokens`, or, with `per_octave` k, of max(tokens, 2**floor(log2(n - 1)) / k) (kernels that
pick larger tiles for larger passes); the rules' `share`s (summing to 1) mix rules for GEMMs that pick
different tiles. `mem_bytes_per_s` and `flops_per_s` are what the kernels achieve, not the spec sheet's
peaks; profiles cite both (docs/step-model.md).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from flatshare.errors import InputError

# Upper bounds far past any GPU (a profile past them is a typo), so a step stays finite and short.
_MOST = {
    "weight_bytes": 1e13,
    "flops_per_token": 1e13,
    "mem_bytes_per_s": 1e15,
    "flops_per_s": 1e18,
    "act_bytes_per_token": 1e9,
    "knee": 64.0,
}
_LEAST = {"mem_bytes_per_s": 1e8, "flops_per_s": 1e9}


def _number(owner: str, name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise InputError(f"{owner}: {name} must be a finite number, got {value!r}")
    return float(value)


@dataclass(frozen=True)
class TileRule:
    """Pad a pass's tokens up to whole tiles of `tokens` rows (growing to 1/`per_octave` of the pass when
    `per_octave` > 0), for `share` of the compute."""

    tokens: int
    per_octave: int = 0
    share: float = 1.0

    def __post_init__(self) -> None:
        for name in ("tokens", "per_octave"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise InputError(f"tile rule: {name} must be an integer, got {value!r}")
        if not 1 <= self.tokens <= 65536 or not 0 <= self.per_octave <= 64:
            raise InputError(
                f"tile rule: tokens must be in 1..65536 and per_octave in 0..64, got {self.tokens}, "
                f"{self.per_octave}"
            )
        share = _number("tile rule", "share", self.share)
        if not 0 <= share <= 1:
            raise InputError(f"tile rule: share must be in 0..1, got {share}")

    def padded(self, n: int) -> int:
        tile = self.tokens
        if self.per_octave and n > 1:
            tile = max(tile, (1 << ((n - 1).bit_length() - 1)) // self.per_octave)
        return -(-n // tile) * tile


@dataclass(frozen=True)
class RooflineLinear:
    """The linear part's coefficients (bytes, FLOPs, per second); see the module's docstring."""

    weight_bytes: float
    flops_per_token: float
    mem_bytes_per_s: float
    flops_per_s: float
    act_bytes_per_token: float = 0.0
    knee: float = 2.0
    tiles: tuple[TileRule, ...] = (TileRule(1),)

    def __post_init__(self) -> None:
        for name, most in _MOST.items():
            value = _number("linear", name, getattr(self, name))
            if not 0 <= value <= most:
                raise InputError(f"linear: {name} must be in 0..{most:g}, got {value!r}")
        for name, least in _LEAST.items():
            if getattr(self, name) < least:
                raise InputError(f"linear: {name} must be >= {least:g}, got {getattr(self, name)!r}")
        if self.knee < 1:
            raise InputError(f"linear: knee must be >= 1 (1 adds memory and compute), got {self.knee!r}")
        if not self.tiles or not all(isinstance(t, TileRule) for t in self.tiles):
            raise InputError("linear: tiles must be a non-empty list of tile rules")
        if abs(sum(t.share for t in self.tiles) - 1) > 1e-6:
            raise InputError(
                f"linear: the tile rules' shares must sum to 1, got {[t.share for t in self.tiles]}"
            )

    def padded_tokens(self, n: int) -> float:
        """The tokens the matrix multiplies compute for a pass of `n`: `n` rounded up to the tiles."""
        return sum(rule.share * rule.padded(n) for rule in self.tiles)

    def memory_s(self, n: int) -> float:
        return (self.weight_bytes + self.act_bytes_per_token * n) / self.mem_bytes_per_s

    def compute_s(self, n: int) -> float:
        return self.flops_per_token * self.padded_tokens(n) / self.flops_per_s

    def time_s(self, n: int) -> float:
        """Seconds of linear work for a pass of `n` tokens (0 for an empty pass)."""
        if n <= 0:
            return 0.0
        memory, compute = self.memory_s(n), self.compute_s(n)
        top = max(memory, compute)
        return top * ((memory / top) ** self.knee + (compute / top) ** self.knee) ** (1 / self.knee)

    @classmethod
    def from_dict(cls, data: object) -> RooflineLinear:
        if not isinstance(data, dict):
            raise InputError("linear: must be an object")
        known = set(cls.__dataclass_fields__)
        unknown = sorted(set(data) - known)
        if unknown:
            raise InputError(f"linear: unknown field(s) {unknown}; valid fields: {sorted(known)}")
        values: dict[str, Any] = dict(data)
        tiles = values.get("tiles", [{"tokens": 1}])
        if not isinstance(tiles, list) or not all(isinstance(t, dict) for t in tiles):
            raise InputError("linear: tiles must be a list of objects")
        try:
            values["tiles"] = tuple(TileRule(**t) for t in tiles)
            return cls(**values)
        except TypeError as exc:
            raise InputError(f"linear: {exc}") from exc

    def to_dict(self) -> dict[str, Any]:
        return {
            "weight_bytes": self.weight_bytes,
            "flops_per_token": self.flops_per_token,
            "mem_bytes_per_s": self.mem_bytes_per_s,
            "flops_per_s": self.flops_per_s,
            "act_bytes_per_token": self.act_bytes_per_token,
            "knee": self.knee,
            "tiles": [{"tokens": t.tokens, "per_octave": t.per_octave, "share": t.share} for t in self.tiles],
        }
