"""`flow-control`: llm-d's flow control as its inference scheduler describes it: every request waits in
the gateway in a queue per priority band; a saturation detector reads each backend's KV use and queue
depth; while the pool is saturated nothing is dispatched; otherwise requests go out strictly by band
(the most important band first; first come first served within a band).

Read (llm-d/llm-d-inference-scheduler, main at commit 520af47, May 2026): `pkg/epp/flowcontrol/README.md`
(the flow controller decides *if* and *when* a request proceeds to scheduling);
`pkg/epp/framework/plugins/flowcontrol/saturationdetector/utilization/README.md` and `detector.go` (the
"utilization detector", default with flow control: an endpoint's score is
`max(waiting / queueDepthThreshold, kv_usage / kvCacheUtilThreshold)`, an endpoint whose metrics are
older than `metricsStalenessThreshold` scores 1.0, the pool's saturation is the mean over endpoints;
defaults 5, 0.8, 200 ms); `pkg/epp/flowcontrol/controller/internal/processor.go` (`dispatchCycle`: bands
from highest priority down, and if the saturation is at or above the band's usage limit the cycle stops,
head-of-line blocking, so lower bands cannot make it worse); `pkg/epp/framework/plugins/flowcontrol/
usagelimits/README.md` (the static usage limit, default 1.0, the same for every band); and the llm-d
docs' Flow Control page (llm-d.ai, docs v0.9: strict priority across bands, FCFS by default).

Here: bands are vLLM priorities (lower is more important, so the lowest number is the highest band);
one flow per band (FCFS). Settings mirror llm-d's: `queue_depth_threshold`, `kv_cache_util_threshold`,
`metrics_staleness_s`, `usage_limit`. One addition, named: a reading cannot show requests sent after it
was taken, so the detector counts them (`BackendLoad.unseen`, and each dispatch of this poll) as waiting
on their backend; llm-d's detector does not, and on a 100 ms scrape it would send a burst per scrape.
Voice turns are held too while the pool is saturated, as llm-d holds every band.
Counters: `saturated_polls` (polls that held requests because the pool was saturated),
`max_saturation_pct` (the highest pool saturation seen, in percent), and the shared `held_*`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass

from flatshare.policy.classes import ClassSettings
from flatshare.policy.gates.core import Decisions, Gate, Send
from flatshare.policy.load import BackendLoad


@dataclass(frozen=True)
class FlowControlSettings(ClassSettings):
    queue_depth_threshold: int = 5
    kv_cache_util_threshold: float = 0.8
    metrics_staleness_s: float = 0.2
    usage_limit: float = 1.0

    def __post_init__(self) -> None:
        if self.queue_depth_threshold < 1:
            raise ValueError(f"queue_depth_threshold must be >= 1, got {self.queue_depth_threshold}")
        if not 0.0 < self.kv_cache_util_threshold <= 1.0:
            raise ValueError(
                f"kv_cache_util_threshold must lie in (0, 1], got {self.kv_cache_util_threshold}"
            )
        if not self.metrics_staleness_s > 0:
            raise ValueError(f"metrics_staleness_s must be > 0, got {self.metrics_staleness_s}")
        if not 0.0 < self.usage_limit <= 1.0:
            raise ValueError(f"usage_limit must lie in (0, 1], got {self.usage_limit}")
        super().__post_init__()


def endpoint_score(load: BackendLoad, settings: FlowControlSettings, extra_waiting: int = 0) -> float:
    """llm-d's roofline score of one backend; 1.0 when its reading is missing or stale."""
    if load.kv_usage is None or load.scrape_age_s > settings.metrics_staleness_s:
        return 1.0
    waiting = load.waiting + load.unseen + extra_waiting
    return max(waiting / settings.queue_depth_threshold, load.kv_usage / settings.kv_cache_util_threshold)


def pool_saturation(
    loads: Mapping[str, BackendLoad], settings: FlowControlSettings, extra: Mapping[str, int] | None = None
) -> float:
    """The mean endpoint score (1.0 with no backend at all, as llm-d)."""
    if not loads:
        return 1.0
    extra = extra or {}
    return sum(endpoint_score(load, settings, extra.get(name, 0)) for name, load in loads.items()) / len(
        loads
    )


class FlowControlGate(Gate):
    name = "flow-control"
    COUNTERS = ("saturated_polls", "max_saturation_pct")

    def __init__(self, settings: FlowControlSettings) -> None:
        super().__init__(settings.classes())
        self.settings = settings

    def _decide(self, now: float, loads: Mapping[str, BackendLoad]) -> Decisions:
        queue = sorted(self.held(), key=lambda t: (t.request.priority, t.seq))
        if not queue:
            return Decisions()
        dispatched: Counter[str] = Counter()
        sends = []
        for tracked in queue:
            saturation = pool_saturation(loads, self.settings, dispatched)
            pct = round(100 * saturation, 3)
            self.counters["max_saturation_pct"] = max(self.counters["max_saturation_pct"], pct)
            if saturation >= self.settings.usage_limit:
                self.counters["saturated_polls"] += 1
                break
            sends.append(Send(tracked.request.id, tracked.request.max_tokens))
            dispatched[tracked.request.backend] += 1
        return Decisions(tuple(sends))
