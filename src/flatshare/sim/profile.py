"""Step-time model: what one engine step costs, priced from the work the scheduler put in it.

A profile is a JSON data file (shipped ones live in `flatshare/sim/profiles/`) whose `sources` field
cites where each coefficient comes from. The cost of a step is

    step_fixed_s
    + prefill_token_s * prefill tokens + decode_token_s * decode tokens
    + prefill_attn_pair_s * sum over prefill chunks of n * (context before the chunk + n / 2)
    + decode_ctx_token_s * sum over decodes of the context read

That is the additive model. A profile with a `linear` object (`flatshare.sim.roofline`) prices the
token-parallel work of the pass instead from the card's memory bandwidth and compute, one cost for all the
pass's tokens together (a batch of decodes is memory-bound: its cost is flat until the pass holds about
a hundred tokens), and then `prefill_token_s` and `decode_token_s` must be 0; the fixed cost and the
attention terms are the same in both models. `step_parts` gives the three parts (docs/step-model.md).

Steps execute one after another (no overlap), with or without async scheduling: vLLM's async
scheduling prepares the next step while one executes, which hides scheduling work, not a step's.
Transfers to and from the CPU KV tier take `kv_bytes_per_token / cpu_load_bytes_per_s` a token on
their own links beside the steps (`flatshare.sim.offload_worker`), priced by `load_time`.

`api_latency_s` (default 0) is the serving front end's share: one pass through vLLM's API server per
request (HTTP, request processing, inter-process hops, output processing) that no engine step covers.
The simulated engine sees each request that much after it was sent, so client-side TTFT and end-to-end
times include it; inter-token gaps do not change.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, NamedTuple

from flatshare import jsonin
from flatshare.errors import InputError
from flatshare.sim.config import UPPER_BOUNDS
from flatshare.sim.roofline import RooflineLinear

DEFAULT_PROFILE = "llama3-8b-24gb"
# The step-time model's coefficients (seconds), in `step_time`'s order.
STEP_COEFFICIENTS = (
    "step_fixed_s",
    "prefill_token_s",
    "decode_token_s",
    "prefill_attn_pair_s",
    "decode_ctx_token_s",
)
# The largest value each field may take: about a thousand times the shipped profiles' values, far past
# any GPU, but small enough that one step (which the engine samples every `sample_interval_s`) takes
# minutes of virtual time at most, and the KV cache's blocks fit in memory. A profile past them (a file
# with `step_fixed_s` 1e300, or `default_kv_tokens` 1e19) ran without end.
LIMITS: dict[str, float] = {
    "step_fixed_s": 1.0,
    "prefill_token_s": 0.1,
    "decode_token_s": 0.1,
    "prefill_attn_pair_s": 1e-5,
    "decode_ctx_token_s": 1e-4,
    "api_latency_s": 10.0,
    "kv_bytes_per_token": 2**24,
    "default_kv_tokens": UPPER_BOUNDS["kv_tokens"],  # the engine takes it as its KV when none is given
}
MIN_CPU_LOAD_BYTES_PER_S = 1e6


class ScheduledWork(NamedTuple):
    """One request's share of a step: `tokens` scheduled on top of `context` already computed."""

    tokens: int
    context: int
    is_decode: bool


class StepParts(NamedTuple):
    """One step's time in parts (seconds): the linear work of the pass, attention (prefill pairs and the KV
    decodes read), and the fixed per-step cost."""

    linear_s: float
    prefill_attention_s: float
    decode_attention_s: float
    fixed_s: float

    @property
    def attention_s(self) -> float:
        return self.prefill_attention_s + self.decode_attention_s

    @property
    def total_s(self) -> float:
        return self.fixed_s + self.linear_s + self.attention_s


@dataclass(frozen=True)
class StepTimeProfile:
    """Coefficients of the step-time model (seconds), and what the KV costs in bytes."""

    name: str
    step_fixed_s: float
    prefill_token_s: float
    decode_token_s: float
    prefill_attn_pair_s: float
    decode_ctx_token_s: float
    kv_bytes_per_token: int
    cpu_load_bytes_per_s: float
    default_kv_tokens: int
    description: str = ""
    sources: tuple[str, ...] = ()
    fit: dict[str, Any] | None = None
    api_latency_s: float = 0.0
    linear: RooflineLinear | None = None

    @property
    def model(self) -> str:
        """The step model: "roofline" (a `linear` object prices the pass) or "additive"."""
        return "additive" if self.linear is None else "roofline"

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name.isprintable():
            raise InputError(f"profile name must be printable text on one line, got {self.name!r}")
        for name in (*STEP_COEFFICIENTS, "api_latency_s", "cpu_load_bytes_per_s"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
                raise InputError(f"profile {self.name}: {name} must be a finite number, got {value!r}")
        for name in ("kv_bytes_per_token", "default_kv_tokens"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise InputError(f"profile {self.name}: {name} must be an integer, got {value!r}")
        for name in (*STEP_COEFFICIENTS, "api_latency_s"):
            if getattr(self, name) < 0:
                raise InputError(f"profile {self.name}: {name} must be >= 0")
        if self.step_fixed_s <= 0:
            raise InputError(f"profile {self.name}: step_fixed_s must be > 0 (a step is never free)")
        if self.kv_bytes_per_token <= 0 or self.cpu_load_bytes_per_s <= 0 or self.default_kv_tokens <= 0:
            raise InputError(
                f"profile {self.name}: kv_bytes_per_token, cpu_load_bytes_per_s and default_kv_tokens "
                "must be > 0"
            )
        for name, most in LIMITS.items():
            if getattr(self, name) > most:
                raise InputError(
                    f"profile {self.name}: {name} must be <= {most:g}, got {getattr(self, name)!r}"
                )
        if self.cpu_load_bytes_per_s < MIN_CPU_LOAD_BYTES_PER_S:
            raise InputError(
                f"profile {self.name}: cpu_load_bytes_per_s must be >= {MIN_CPU_LOAD_BYTES_PER_S:g}, "
                f"got {self.cpu_load_bytes_per_s!r}"
            )
        if not isinstance(self.description, str):
            raise InputError(f"profile {self.name}: description must be a string")
        if not all(isinstance(s, str) for s in self.sources):
            raise InputError(f"profile {self.name}: sources must be a list of strings")
        if self.fit is not None and not isinstance(self.fit, dict):
            raise InputError(f"profile {self.name}: fit must be an object")
        if self.linear is not None:
            if not isinstance(self.linear, RooflineLinear):
                raise InputError(f"profile {self.name}: linear must be a linear-work object")
            if self.prefill_token_s or self.decode_token_s:
                raise InputError(
                    f"profile {self.name}: with a linear object, prefill_token_s and decode_token_s must "
                    "be 0 (the linear object prices every token of the pass)"
                )

    def step_time(self, work: Iterable[ScheduledWork]) -> float:
        """Virtual seconds one step takes for the given scheduled work."""
        if self.linear is not None:
            return self.step_parts(work).total_s
        total = self.step_fixed_s
        for item in work:
            if item.is_decode:
                total += self.decode_token_s * item.tokens + self.decode_ctx_token_s * item.context
            else:
                pairs = item.tokens * (item.context + item.tokens / 2)
                total += self.prefill_token_s * item.tokens + self.prefill_attn_pair_s * pairs
        return total

    def step_parts(self, work: Iterable[ScheduledWork]) -> StepParts:
        """One step's time in parts; their sum is `step_time` (to rounding, for additive profiles)."""
        prefill = decode = 0
        prefill_attn = decode_attn = 0.0
        for item in work:
            if item.is_decode:
                decode += item.tokens
                decode_attn += self.attention_s(item)
            else:
                prefill += item.tokens
                prefill_attn += self.attention_s(item)
        if self.linear is None:
            linear = self.prefill_token_s * prefill + self.decode_token_s * decode
        else:
            linear = self.linear.time_s(prefill + decode)
        return StepParts(linear, prefill_attn, decode_attn, self.step_fixed_s)

    def attention_s(self, item: ScheduledWork) -> float:
        """One request's attention in a step: the KV its decode reads, or its prefill chunk's pairs."""
        if item.is_decode:
            return self.decode_ctx_token_s * item.context
        return self.prefill_attn_pair_s * item.tokens * (item.context + item.tokens / 2)

    def load_time(self, tokens: int) -> float:
        """Seconds to bring `tokens` tokens of KV from the CPU tier to the GPU."""
        return tokens * self.kv_bytes_per_token / self.cpu_load_bytes_per_s

    @classmethod
    def from_dict(cls, data: dict[str, Any], origin: str = "profile") -> StepTimeProfile:
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise InputError(f"{origin}: unknown field(s) {unknown}; valid fields: {sorted(known)}")
        try:
            values = dict(data)
            sources = values.get("sources", ())
            if not isinstance(sources, list | tuple):
                raise InputError(f"profile {values.get('name')!r}: sources must be a list of strings")
            values["sources"] = tuple(sources)
            if values.get("linear") is not None:
                values["linear"] = RooflineLinear.from_dict(values["linear"])
            return cls(**values)
        except TypeError as exc:
            raise InputError(f"{origin}: {exc}") from exc
        except InputError as exc:
            if origin.startswith("profile "):  # a shipped profile: the message names it already
                raise
            raise InputError(f"{origin}: {exc}") from exc  # a file: name the file too

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["sources"] = list(self.sources)
        if data["fit"] is None:
            del data["fit"]
        if self.linear is None:
            del data["linear"]
        else:
            data["linear"] = self.linear.to_dict()
        return data


def check_not_shipped(path: Path, option: str = "--out") -> None:
    """InputError when `path` lies in the folder of the shipped profiles: those are part of the package
    (tracked, overwritten by a reinstall); a calibrated profile goes where the user says and is used by
    its path (`--profile PATH.json`)."""
    folder = Path(str(resources.files("flatshare.sim") / "profiles")).resolve()
    if path.resolve().parent == folder:
        raise InputError(
            f"{option} {path}: that is the folder of flatshare's shipped profiles, which are part of the "
            f"package; write the profile elsewhere (e.g. {option} {path.name}) and pass its path to --profile"
        )


def shipped_profiles() -> list[str]:
    """Names of the profiles that ship with flatshare."""
    folder = resources.files("flatshare.sim") / "profiles"
    return sorted(p.name.removesuffix(".json") for p in folder.iterdir() if p.name.endswith(".json"))


def load_profile(name_or_path: str = DEFAULT_PROFILE) -> StepTimeProfile:
    """Load a shipped profile by name, or a profile file by path."""
    path = Path(name_or_path)
    if path.suffix == ".json" and path.exists():
        text, origin = jsonin.read_text(path), str(path)
    else:
        resource = resources.files("flatshare.sim") / "profiles" / f"{name_or_path}.json"
        if not resource.is_file():
            raise InputError(
                f"profile {name_or_path!r}: not a file and not a shipped profile "
                f"({', '.join(shipped_profiles())})"
            )
        text, origin = resource.read_text(), f"profile {name_or_path}"
    data = jsonin.loads(text, origin)
    if not isinstance(data, dict):
        raise InputError(f"{origin}: must be a JSON object")
    return StepTimeProfile.from_dict(data, origin)
