"""Gateway-side baselines: admission mechanisms a gateway in front of vLLM can apply, written
once as pure policies (`core.Gate`) and driven by the virtual-time driver (`flatshare.replay.virtual`,
`run_virtual(..., gate=...)`) and by the real gateway (`flatshare.gateway.gating`, config `baseline`).
Nothing here imports starlette, httpx or vLLM.

- `agent-cap` (`agent_cap`): at most N agent requests in flight per backend, the rest wait FIFO.
- `abort-resubmit` (`abort_resubmit`): a voice turn's arrival aborts its backend's agent requests that
  have no token yet; they are resubmitted once the turn's first token is out.
- `flow-control` (`flow_control`): llm-d's flow control: priority bands, a saturation detector on KV use
  and queue depth, dispatch strictly by band while the pool is not saturated.
- `leaseholder` (`leaseholder`): the first seed's Leaseholder: defer agents while a caller speaks,
  pace agents while a voice turn is answered, shorten voice replies when KV use is high.

`make_gate(name, settings)` builds one from a flat mapping of settings (a config file's table or a
condition's dict); unknown names and keys are refused with a ValueError naming them. Operator guide:
docs/baselines-gateway.md.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

from flatshare.policy.classes import Classes
from flatshare.policy.gates.abort_resubmit import AbortResubmitGate, AbortResubmitSettings
from flatshare.policy.gates.agent_cap import AgentCapGate, AgentCapSettings
from flatshare.policy.gates.core import Decisions, Gate, GateEvent, GateRequest, Send
from flatshare.policy.gates.flow_control import FlowControlGate, FlowControlSettings
from flatshare.policy.gates.leaseholder import LeaseholderGate, LeaseholderSettings

_KINDS: dict[str, tuple[type[Any], Callable[[Any], Gate]]] = {
    "agent-cap": (AgentCapSettings, AgentCapGate),
    "abort-resubmit": (AbortResubmitSettings, AbortResubmitGate),
    "flow-control": (FlowControlSettings, FlowControlGate),
    "leaseholder": (LeaseholderSettings, LeaseholderGate),
}
BASELINE_NAMES = tuple(_KINDS)

__all__ = [
    "BASELINE_NAMES",
    "Classes",
    "Decisions",
    "Gate",
    "GateEvent",
    "GateRequest",
    "Send",
    "make_gate",
    "make_settings",
]


def make_settings(name: str, settings: Mapping[str, Any] | None = None) -> Any:
    """The named baseline's validated settings (defaults for keys not given). Integers may be given as
    whole floats (a TOML/JSON table); anything else wrong raises ValueError naming the setting."""
    if name not in _KINDS:
        raise ValueError(f"unknown baseline {name!r}; choose from {', '.join(BASELINE_NAMES)}")
    cls = _KINDS[name][0]
    fields = {f.name: f for f in dataclasses.fields(cls)}
    given = dict(settings or {})
    unknown = sorted(set(given) - set(fields))
    if unknown:
        raise ValueError(
            f"baseline {name}: unknown setting {', '.join(unknown)} (known: {', '.join(fields)})"
        )
    values = {key: _value(name, key, fields[key].type, value) for key, value in given.items()}
    return cls(**values)


def _value(baseline: str, key: str, hint: object, value: object) -> int | float | str:
    if hint in (str, "str"):
        if not isinstance(value, str):
            raise ValueError(f"baseline {baseline}: setting {key} must be a string, got {value!r}")
        return value
    whole = isinstance(value, int) or (isinstance(value, float) and value.is_integer())
    if isinstance(value, bool) or not isinstance(value, int | float) or (hint in (int, "int") and not whole):
        kind = "an integer" if hint in (int, "int") else "a number"
        raise ValueError(f"baseline {baseline}: setting {key} must be {kind}, got {value!r}")
    return int(value) if hint in (int, "int") else float(value)


def make_gate(name: str, settings: Mapping[str, Any] | None = None) -> Gate:
    """A fresh gate of the named baseline (see the module docstring)."""
    validated = make_settings(name, settings)
    return _KINDS[name][1](validated)
