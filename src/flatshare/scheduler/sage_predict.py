"""sage's output-length predictor: an empirical distribution per prompt-feature bucket, from the lengths of
recently finished requests, with a prior while history is thin. Pure Python, no model weights.

SageSched (arXiv 2603.07917, abstract) predicts a distribution of the output length "lightly" from the
prompt's content combined with past inferences; this is flatshare's reconstruction of that sentence:
- features: the prompt's length bucket (`bit_length` of its token count: powers of two) and a content
  signature, a CRC-32 of its first `signature_tokens` token ids in `signature_buckets` buckets (requests
  that open alike, such as one system prompt or one template, share it);
- history: the last `history_per_bucket` realized lengths per (length bucket, signature), at most
  `max_buckets` such buckets (the least recently used dropped), and the same per length bucket alone;
- prediction: the finest level holding at least `min_history` lengths (signature, then length bucket, then
  every bucket), mixed with `prior_weight` pseudo-observations of a log-uniform prior over
  [1, `prior_max_tokens`]; the prior alone while nothing has finished.
Memory is bounded by `max_buckets * history_per_bucket` lengths; a prediction sorts at most
`history_per_bucket * 4 + prior_weight` values.
"""

from __future__ import annotations

import array
import bisect
import math
import zlib
from collections import OrderedDict, defaultdict, deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

MAX_LENGTH_BUCKET = 40


@dataclass(frozen=True)
class Features:
    """What the predictor knows of a prompt before it runs."""

    length_bucket: int
    signature: int


def prompt_features(
    prompt_token_ids: Sequence[int] | None, num_prompt_tokens: int, signature_tokens: int, buckets: int
) -> Features:
    """The prompt's length bucket (powers of two) and the hash bucket of its first tokens (0 without ids)."""
    head = list(prompt_token_ids[:signature_tokens]) if prompt_token_ids is not None else []
    digest = zlib.crc32(array.array("q", head).tobytes()) if head else 0
    return Features(min(num_prompt_tokens.bit_length(), MAX_LENGTH_BUCKET), digest % buckets)


@dataclass(frozen=True)
class LengthDistribution:
    """A discrete distribution of output lengths: ascending distinct `values` with positive `weights`."""

    values: tuple[int, ...]
    weights: tuple[float, ...]

    def __post_init__(self) -> None:
        if not self.values or len(self.values) != len(self.weights):
            raise ValueError("a length distribution needs one weight per value, and at least one value")
        if any(b <= a for a, b in zip(self.values, self.values[1:], strict=False)):
            raise ValueError("length distribution values must be ascending and distinct")
        if min(self.values) < 1 or min(self.weights) <= 0:
            raise ValueError("lengths must be >= 1 and weights > 0")

    @classmethod
    def of(cls, samples: Iterable[tuple[int, float]]) -> LengthDistribution:
        """From (value, weight) pairs, equal values merged."""
        merged: defaultdict[int, float] = defaultdict(float)
        for value, weight in samples:
            merged[value] += weight
        values = sorted(merged)
        return cls(tuple(values), tuple(float(merged[v]) for v in values))

    @property
    def total(self) -> float:
        return math.fsum(self.weights)

    def cdf(self, length: float) -> float:
        """P(L <= length)."""
        return math.fsum(self.weights[: bisect.bisect_right(self.values, length)]) / self.total

    def quantile(self, q: float) -> int:
        """The smallest value whose cdf reaches `q`."""
        target, acc = q * self.total, 0.0
        for value, weight in zip(self.values, self.weights, strict=True):
            acc += weight
            if acc >= target - 1e-12:
                return value
        return self.values[-1]

    def summarized(self, points: int) -> LengthDistribution:
        """At most `points` values: the mid-quantiles `(i + 0.5) / points`, equally weighted (so ranking a
        request costs O(points) whatever the history's size)."""
        if len(self.values) <= points:
            return self
        return LengthDistribution.of((self.quantile((i + 0.5) / points), 1.0) for i in range(points))

    def capped(self, cap: int) -> LengthDistribution:
        """The distribution of min(L, cap)."""
        return LengthDistribution.of((min(v, cap), w) for v, w in zip(self.values, self.weights, strict=True))


def log_uniform_prior(weight: int, max_tokens: int) -> list[tuple[int, float]]:
    """`weight` pseudo-observations at the mid-quantiles of a log-uniform distribution over [1, max]."""
    top = math.log(max_tokens)
    return [(max(1, round(math.exp(top * (i + 0.5) / weight))), 1.0) for i in range(weight)]


class LengthPredictor:
    """Output-length distributions from recent history per feature bucket (module docstring)."""

    def __init__(
        self,
        history_per_bucket: int = 64,
        max_buckets: int = 1024,
        min_history: int = 8,
        prior_weight: int = 4,
        prior_max_tokens: int = 2048,
    ) -> None:
        self.history_per_bucket, self.max_buckets, self.min_history = (
            history_per_bucket,
            max_buckets,
            min_history,
        )
        self._prior = log_uniform_prior(prior_weight, prior_max_tokens)
        self._prior_max = prior_max_tokens
        self._fine: OrderedDict[Features, deque[int]] = OrderedDict()
        self._coarse: dict[int, deque[int]] = {}
        self._all: deque[int] = deque(maxlen=4 * history_per_bucket)

    def observe(self, features: Features, length: int) -> None:
        """Record a finished request's realized output length."""
        length = max(1, int(length))
        fine = self._fine.get(features)
        if fine is None:
            fine = self._fine[features] = deque(maxlen=self.history_per_bucket)
            if len(self._fine) > self.max_buckets:
                self._fine.popitem(last=False)
        self._fine.move_to_end(features)
        fine.append(length)
        coarse = self._coarse.setdefault(features.length_bucket, deque(maxlen=self.history_per_bucket))
        coarse.append(length)
        self._all.append(length)

    def history(self, features: Features) -> Sequence[int]:
        """The lengths a prediction for `features` draws on (possibly none)."""
        for level in (self._fine.get(features), self._coarse.get(features.length_bucket), self._all):
            if level is not None and len(level) >= self.min_history:
                return level
        return self._all

    def predict(self, features: Features, cap: int | None = None) -> LengthDistribution:
        """The predicted output-length distribution, clipped at `cap` (a request's `max_tokens`) if given."""
        samples = [(v, 1.0) for v in self.history(features)] + self._prior
        if not samples:  # no history and no prior: assume the prior's longest
            samples = [(self._prior_max, 1.0)]
        dist = LengthDistribution.of(samples)
        return dist.capped(cap) if cap is not None else dist

    @property
    def buckets(self) -> int:
        return len(self._fine)
