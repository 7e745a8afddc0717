"""Routing policies: pure functions `(RequestFeatures, tuple[BackendLoad, ...]) -> RoutingDecision`.

No I/O, no clocks, no hidden state: the same inputs give the same decision (`random` draws from the
`random.Random` it is given, so a seeded generator makes it reproducible). The gateway and the
simulated cluster of the admission experiment call these same functions. Every policy receives only
candidates (see `routing.py` and `load.py`): a non-empty tuple in configured order.

- `threshold` (the second seed's rule): pick the preferred backend with `prefer` (round-robin by
  default). If the request's input tokens exceed `thresholds.input_tokens` *and* the preferred
  backend's KV use exceeds `thresholds.kv_usage`, send the request to the least-pressured other
  backend (lowest KV use, then fewest waiting, then configured order), provided it is less pressured
  than the preferred one; otherwise keep the preferred backend. Stale readings count as full KV
  (`load.UNKNOWN_PRESSURE`), so a long request is not placed where the gateway cannot see.
- `round-robin`: candidate `sequence mod n`.
- `first`: the first candidate (all traffic to one backend while it is healthy; the seed's baseline).
- `least-kv`: lowest KV use (then fewest waiting, then order).
- `least-waiting`: fewest waiting requests (then lowest KV use, then order).
- `random`: uniform over the candidates.
"""

from __future__ import annotations

import functools
import random
from collections.abc import Callable

from flatshare.policy.load import BackendLoad
from flatshare.policy.routing import RequestFeatures, RoutingDecision, Thresholds

Backends = tuple[BackendLoad, ...]
Policy = Callable[[RequestFeatures, Backends], RoutingDecision]

POLICY_NAMES = ("threshold", "round-robin", "least-kv", "least-waiting", "random", "first")
PREFER_NAMES = ("round-robin", "first", "least-kv", "least-waiting")
REASONS = (
    "below_input_threshold",  # threshold: a short request stays on the preferred backend
    "below_kv_threshold",  # threshold: a long request, but the preferred backend has room
    "kv_pressure",  # threshold: a long request moved off a preferred backend under KV pressure
    "no_better_backend",  # threshold: long request, pressured backend, nowhere less pressured
    "round_robin",
    "first",
    "least_kv",
    "least_waiting",
    "random",
    "no_backend",  # the gateway: no candidate at all (503), never returned by a policy
)


def _pick(backend: BackendLoad, reason: str) -> RoutingDecision:
    return RoutingDecision(backend.name, reason, backend.name)


def _pressure_key(backend: BackendLoad) -> tuple[float, float]:
    return (backend.pressure, backend.queue)


def round_robin(features: RequestFeatures, backends: Backends) -> RoutingDecision:
    """Candidate number `features.sequence mod len(backends)`."""
    return _pick(backends[features.sequence % len(backends)], "round_robin")


def first(features: RequestFeatures, backends: Backends) -> RoutingDecision:
    """The first candidate in configured order."""
    return _pick(backends[0], "first")


def least_kv(features: RequestFeatures, backends: Backends) -> RoutingDecision:
    """Lowest KV use; ties go to fewer waiting, then to configured order (`min` keeps the first)."""
    return _pick(min(backends, key=_pressure_key), "least_kv")


def least_waiting(features: RequestFeatures, backends: Backends) -> RoutingDecision:
    """Fewest waiting requests; ties go to lower KV use, then to configured order."""
    return _pick(min(backends, key=lambda b: (b.queue, b.pressure)), "least_waiting")


def random_choice(features: RequestFeatures, backends: Backends, rng: random.Random) -> RoutingDecision:
    """A uniform draw from `rng` (one `randrange` call per decision)."""
    return _pick(backends[rng.randrange(len(backends))], "random")


def threshold(
    features: RequestFeatures,
    backends: Backends,
    thresholds: Thresholds,
    prefer: Policy = round_robin,
) -> RoutingDecision:
    """The seed's rule (module docstring): move a long request off a KV-pressured preferred backend."""
    preferred_name = prefer(features, backends).backend
    preferred = next(b for b in backends if b.name == preferred_name)
    if features.input_tokens <= thresholds.input_tokens:
        return _pick(preferred, "below_input_threshold")
    if preferred.pressure <= thresholds.kv_usage:
        return _pick(preferred, "below_kv_threshold")
    others = [b for b in backends if b.name != preferred.name]
    if others:
        best = min(others, key=_pressure_key)
        if best.pressure < preferred.pressure:
            return RoutingDecision(best.name, "kv_pressure", preferred.name)
    return _pick(preferred, "no_better_backend")


_SIMPLE: dict[str, Policy] = {
    "round-robin": round_robin,
    "first": first,
    "least-kv": least_kv,
    "least-waiting": least_waiting,
}


def check_routing_names(policy: str, prefer: str) -> None:
    """ValueError unless `policy` and `prefer` name a policy and a preferred-backend rule."""
    if policy not in POLICY_NAMES:
        raise ValueError(f"policy must be one of {', '.join(POLICY_NAMES)}, got {policy!r}")
    if prefer not in PREFER_NAMES:
        raise ValueError(f"prefer must be one of {', '.join(PREFER_NAMES)}, got {prefer!r}")


def make_policy(
    name: str, thresholds: Thresholds | None = None, prefer: str = "round-robin", seed: int = 0
) -> Policy:
    """The named policy as a two-argument function (`threshold` needs `thresholds`)."""
    if name in _SIMPLE:
        return _SIMPLE[name]
    if name == "random":
        return functools.partial(random_choice, rng=random.Random(seed))
    if name == "threshold":
        if thresholds is None:
            raise ValueError("the threshold policy needs thresholds")
        if prefer not in _SIMPLE:
            raise ValueError(f"prefer must be one of {', '.join(PREFER_NAMES)}, got {prefer!r}")
        return functools.partial(threshold, thresholds=thresholds, prefer=_SIMPLE[prefer])
    raise ValueError(f"unknown policy {name!r}; choose from {', '.join(POLICY_NAMES)}")
