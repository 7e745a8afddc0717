"""sage's settings, read from vLLM's `--additional-config '{"sage": {...}}'`.

sage is a SageSched-style baseline after the abstract of arXiv 2603.07917 (Gan et al., 2026); the paper's
method section could not be read, and the Gittins-index policy and the cost weights are flatshare's
reconstruction (docs/baselines-engine.md).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from flatshare.scheduler.sections import check_bools, check_int, read_section

SAGE_CONFIG_KEY = "sage"


class SageConfigError(ValueError):
    """Invalid sage settings; raised when the scheduler is built, so vLLM fails at start-up."""


def _check_float(config: object, name: str, minimum: float, allow_none: bool = False) -> None:
    value = getattr(config, name)
    if value is None and allow_none:
        return
    ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    if not ok or value < minimum:
        raise SageConfigError(f"{SAGE_CONFIG_KEY}.{name} must be a finite number >= {minimum}, got {value!r}")


@dataclass(frozen=True)
class SageConfig:
    """sage's settings.

    `enabled`: off by default, and then the scheduler behaves exactly as vLLM's.
    Predictor (`sage_predict`): `history_per_bucket` realized output lengths kept per feature bucket (the
    most recent), at most `max_buckets` buckets (least recently used dropped); a bucket is used once it
    holds `min_history` lengths, else the coarser prompt-length bucket, else all history; `prior_weight`
    pseudo-observations of a log-uniform prior over [1, `prior_max_tokens`] are mixed in (the prior alone
    when nothing has finished yet); the content signature hashes the first `signature_tokens` prompt
    tokens into `signature_buckets` buckets. `cap_at_max_tokens`: clip predicted lengths at the request's
    `max_tokens` (real information in a deployment; in a replay that sets `max_tokens` to the realized
    length it is an oracle, so the admission experiment turns it off).
    Cost (`sage_policy.CostWeights`): `prefill_weight` and `decode_weight` per token; `memory_weight` per
    token of KV held for one step, None meaning `max_num_batched_tokens / KV capacity in tokens` (holding
    the whole cache for one step costs one full step's token budget).
    `aging_per_s`: cost units (tokens) taken off a waiting request's rank per second it has waited, the
    bound on starvation: a request of rank r is passed only by requests that arrive less than
    `r / aging_per_s` seconds after it (0 turns aging off and the bound with it).
    `preempt_prefill`: when the running requests take the whole step budget, preempt (vLLM's own path) the
    worst-keyed running request still in its prefill if the next waiting request's key is better: its
    computed full blocks stay in vLLM's prefix cache until evicted, so it resumes mostly from there; at
    most one a step. Aging bounds how often one request can be preempted this way.
    `order_running`: also order vLLM's running list by rank each step (its token budget goes to the
    running requests in that order, and under FCFS the last one is vLLM's preemption victim).
    `allow_untested_vllm`: run on a vLLM version this was not tested against (a warning instead of a
    start-up error); the environment variable FLATSHARE_ALLOW_UNTESTED_VLLM=1 does the same.
    """

    enabled: bool = False
    history_per_bucket: int = 64
    max_buckets: int = 1024
    min_history: int = 8
    prior_weight: int = 4
    prior_max_tokens: int = 2048
    signature_tokens: int = 16
    signature_buckets: int = 64
    cap_at_max_tokens: bool = True
    prefill_weight: float = 1.0
    decode_weight: float = 1.0
    memory_weight: float | None = None
    aging_per_s: float = 4096.0
    preempt_prefill: bool = True
    order_running: bool = True
    allow_untested_vllm: bool = False

    def __post_init__(self) -> None:
        key, error = SAGE_CONFIG_KEY, SageConfigError
        check_bools(
            self,
            key,
            ("enabled", "cap_at_max_tokens", "preempt_prefill", "order_running", "allow_untested_vllm"),
            error,
        )
        for name in ("history_per_bucket", "max_buckets", "min_history", "prior_max_tokens"):
            check_int(self, key, name, 1, error)
        for name in ("prior_weight", "signature_tokens"):
            check_int(self, key, name, 0, error)
        check_int(self, key, "signature_buckets", 1, error)
        if self.min_history > self.history_per_bucket:
            raise error(f"{key}.min_history must be <= history_per_bucket ({self.history_per_bucket})")
        _check_float(self, "prefill_weight", 0.0)
        _check_float(self, "decode_weight", 0.0)
        _check_float(self, "memory_weight", 0.0, allow_none=True)
        _check_float(self, "aging_per_s", 0.0)
        if self.prefill_weight + self.decode_weight <= 0:
            raise error(f"{key}: prefill_weight and decode_weight cannot both be 0")

    @classmethod
    def from_additional_config(cls, additional: Mapping[str, Any] | None) -> SageConfig:
        """Read `additional_config["sage"]`; absent means disabled. Unknown keys are errors."""
        return read_section(additional, SAGE_CONFIG_KEY, cls, SageConfigError)
