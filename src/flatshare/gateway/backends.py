"""What the gateway knows of each backend: its last good scrape, its failures, its models.

Health rules (times from a monotonic clock passed in, so tests need no sleeping):
- a good scrape (by the poller) stores the readings and resets the failure count; the backend is healthy;
- a failed scrape, or a connection the proxy could not open, counts one failure; after
  `unhealthy_after_failures` in a row the backend is unhealthy and gets no new requests until a good
  scrape. A refused connection counts as all of them at once: the server is not there;
- without a good scrape for `stale_after_s` the backend is stale: still routable, but policies count
  its KV as full (`routing.BackendLoad.pressure`).

Every flip of health goes to the state's `on_health` hook, whoever recorded it: the poller, or the
proxy finding the backend gone (a refused connection, a stream cut) before the next poll does.

Degraded is the proxy's view, apart from health (a backend may answer its polls and hang on
completions): a streaming request that got no response head within `first_byte_timeout_s` marks the
backend degraded (`mark_degraded`). A degraded backend is a candidate only when no healthy backend that
is not degraded can take the request, until `degraded_retry_s` have passed (then one request may try it
again: a half-open breaker); any answer in time ends it (`answered`).

`poller` says how the backend's poller is: `starting`, `running`, or `dead` (it ended on an exception it
did not survive, `watch.py`; the backend is then unhealthy, as nothing will read it again).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from flatshare.gateway.backendlimits import BackendLimits
from flatshare.gateway.config import BackendConfig, PollConfig
from flatshare.policy.load import BackendLoad


@dataclass
class BackendState:
    """Mutable per-backend state, owned by the event loop (no locks needed)."""

    config: BackendConfig
    poll: PollConfig
    reading: BackendLoad | None = None
    """The last good scrape (`flatshare.protocol.prometheus.parse_load`), None before the first."""
    last_good_s: float = -math.inf
    failures: int = 0
    last_error: str = ""
    models: frozenset[str] = field(default_factory=frozenset)
    model_cards: tuple[dict[str, object], ...] = ()
    on_models: Callable[[], None] | None = None
    on_health: Callable[[BackendState, str], None] | None = None
    """Called after a recorded scrape or failure flips `healthy`, with the state and the failure that
    made it unhealthy ("" when it turned healthy); the poller sets it (logging, membership)."""
    limits: BackendLimits = field(default_factory=BackendLimits)
    degraded_at_s: float | None = None
    degraded_error: str = ""
    poller: str = "starting"

    @property
    def name(self) -> str:
        return self.config.name

    @property
    def healthy(self) -> bool:
        return self.reading is not None and self.failures < self.poll.unhealthy_after_failures

    def record_scrape(self, reading: BackendLoad, now_s: float) -> None:
        was_healthy = self.healthy
        self.reading = reading
        self.last_good_s = now_s
        self.failures = 0
        self.last_error = ""
        self._tell(was_healthy, "")

    def record_failure(self, error: str, refused: bool = False) -> None:
        """One failure; a refused connection marks the backend unhealthy at once."""
        was_healthy = self.healthy
        self.failures = self.poll.unhealthy_after_failures if refused else self.failures + 1
        self.last_error = error
        self._tell(was_healthy, error)

    def _tell(self, was_healthy: bool, error: str) -> None:
        if self.healthy != was_healthy and self.on_health is not None:
            self.on_health(self, error)

    def mark_degraded(self, error: str, now_s: float) -> None:
        """The backend missed the first-byte timeout (module docstring)."""
        self.degraded_at_s = now_s
        self.degraded_error = error

    @property
    def error(self) -> str:
        """What went wrong last: the last failure, else why it is degraded (else "")."""
        return self.last_error or (self.degraded_error if self.degraded_at_s is not None else "")

    def answered(self) -> None:
        """A proxied request got its answer's head in time: not degraded any more."""
        self.degraded_at_s = None

    def degraded(self, now_s: float) -> bool:
        """Whether routing avoids the backend now (module docstring)."""
        since = self.degraded_at_s
        return since is not None and now_s - since < self.limits.degraded_retry_s

    def poller_died(self, error: str) -> None:
        """Its poller ended for good: unhealthy, with the reason, from now on."""
        self.poller = "dead"
        was_healthy = self.healthy
        self.failures = self.poll.unhealthy_after_failures
        self.last_error = f"poller died: {error}"
        self._tell(was_healthy, self.last_error)

    def set_models(self, cards: Iterable[dict[str, object]]) -> None:
        self.model_cards = tuple(cards)
        self.models = frozenset(str(card.get("id")) for card in self.model_cards)
        if self.on_models is not None:
            self.on_models()

    def scrape_age_s(self, now_s: float) -> float:
        return now_s - self.last_good_s

    def snapshot(self, now_s: float) -> BackendLoad:
        """The last reading with its age and the gateway's view of the backend now."""
        age = self.scrape_age_s(now_s)
        reading = self.reading
        if reading is None:
            return BackendLoad(self.name, scrape_age_s=age, stale=True, healthy=False)
        return dataclasses.replace(
            reading,
            name=self.name,
            scrape_age_s=age,
            stale=age > self.poll.stale_after_s,
            healthy=self.healthy,
            degraded=self.degraded(now_s),
        )


class BackendPool:
    """All backends: the configured ones in their order, then discovered ones in the order they came.

    `add` and `remove` change the membership (DNS discovery, `membership.py`). `states` and `by_name`
    are replaced or changed in place on the event loop between awaits, so a routing decision (which
    reads both without awaiting) always sees one membership. A removed backend leaves both at once: no
    snapshot, no candidate, no new request; requests already sent hold their own reference and finish.
    """

    def __init__(
        self, backends: Iterable[BackendConfig], poll: PollConfig, limits: BackendLimits | None = None
    ) -> None:
        self.poll = poll
        self.limits = limits or BackendLimits()
        self.states: tuple[BackendState, ...] = tuple(self._state(config) for config in backends)
        self.by_name = {state.name: state for state in self.states}
        self.known_models: frozenset[str] = frozenset()
        """Every model any backend has listed (healthy or not); kept current by `set_models`."""

    def add(self, config: BackendConfig) -> BackendState:
        """A new member, unhealthy until its first good poll. ValueError if the name is taken."""
        if config.name in self.by_name:
            raise ValueError(f"backend {config.name!r} is already a member")
        state = self._state(config)
        self.states = (*self.states, state)
        self.by_name[state.name] = state
        return state

    def _state(self, config: BackendConfig) -> BackendState:
        return BackendState(config, self.poll, on_models=self._models_changed, limits=self.limits)

    def remove(self, name: str) -> BackendState:
        """Take a member out (KeyError if it is none); its models stop counting as known."""
        state = self.by_name.pop(name)
        self.states = tuple(s for s in self.states if s is not state)
        self._models_changed()
        return state

    def _models_changed(self) -> None:
        self.known_models = frozenset().union(*(state.models for state in self.states))

    def snapshots(self, now_s: float) -> tuple[BackendLoad, ...]:
        return tuple(state.snapshot(now_s) for state in self.states)

    def candidates(
        self, snapshots: tuple[BackendLoad, ...], model: str | None, exclude: frozenset[str] = frozenset()
    ) -> tuple[BackendLoad, ...]:
        """The snapshots a policy may choose from: healthy, serving `model` (any when None), not excluded,
        and not degraded unless every such backend is (module docstring)."""
        able = tuple(
            snap
            for snap in snapshots
            if snap.healthy
            and snap.name not in exclude
            and (model is None or model in self.by_name[snap.name].models)
        )
        responsive = tuple(snap for snap in able if not snap.degraded)
        return responsive or able

    def model_cards(self) -> list[dict[str, object]]:
        """Every healthy backend's /v1/models cards, one per model id (the first backend's card)."""
        cards: dict[str, dict[str, object]] = {}
        for state in self.states:
            if state.healthy:
                for card in state.model_cards:
                    cards.setdefault(str(card.get("id")), card)
        return list(cards.values())
