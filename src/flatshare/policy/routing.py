"""What a routing policy sees and says: pure data, no I/O.

A policy is a function `(RequestFeatures, tuple[BackendLoad, ...]) -> RoutingDecision`. The gateway
builds the features from the HTTP request and the snapshots from its pollers; the simulated cluster of the
admission experiment builds both from its own state and calls the same functions (`policies.py`).

The snapshots a policy receives are the *candidates*: backends that are healthy, serve the requested
model and have not already failed this request. The tuple is never empty (with no candidate the gateway
answers 503 without asking a policy) and keeps the configured backend order.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Thresholds:
    """The threshold rule's two thresholds: KV use (0-1) and input tokens. Both must be exceeded."""

    kv_usage: float
    input_tokens: int

    def __post_init__(self) -> None:
        if not 0.0 <= self.kv_usage <= 1.0:
            raise ValueError(f"kv_usage threshold must lie in [0, 1], got {self.kv_usage}")
        if self.input_tokens < 0:
            raise ValueError(f"input_tokens threshold must be >= 0, got {self.input_tokens}")


@dataclass(frozen=True)
class ThresholdConfig:
    """The threshold policy's thresholds; `calibrated_from` records what `calibrate` read (else empty)."""

    kv_usage: float = 0.8
    input_tokens: int = 4096
    calibrated_from: str = ""

    def __post_init__(self) -> None:
        self.thresholds()  # validates

    def thresholds(self) -> Thresholds:
        return Thresholds(self.kv_usage, self.input_tokens)


@dataclass(frozen=True)
class RequestFeatures:
    """One request as a policy sees it.

    `sequence` is the gateway's arrival counter (0, 1, 2, ...): the explicit state that makes
    round-robin a pure function. `priority` is vLLM's (lower runs first), after the tenant clamp.
    """

    request_id: str
    input_tokens: int
    sequence: int
    priority: int = 0
    cls: str = "default"
    max_tokens: int | None = None


@dataclass(frozen=True)
class RoutingDecision:
    """Where a request goes and why.

    `backend` is the chosen snapshot's name; `preferred` the backend the policy would have chosen before
    any pressure rule (equal to `backend` for policies without one); `reason` a short label from
    `policies.REASONS`, used as a metrics label and in the audit log.
    """

    backend: str
    reason: str
    preferred: str
