"""The real `flatshare gateway` a gateway-side baseline runs in front of its real `vllm serve`
(`--engine vllm`): its settings, its command line, and reading its gate's counters back.

The condition's `gate` and `gate_settings` become the gateway's `baseline` and `baseline_settings`, the
same mapping `flatshare.colocation.experiment.build_run` hands `make_gate` in the simulated run. The
gateway polls its one backend every 0.05 s (the simulated gate sees the engine fresh at every poll) and
counts a prompt's tokens from its token ids (`tokens.source = "estimate"`: no `/tokenize` round trip).
`POST /gateway/events` is on (an admin token made for the run, passed in the environment, never on the
command line), so the replay can tell the gate when callers speak and tools return
(`flatshare.replay.gatewayevents`). The config file is JSON, written beside the run's server logs.
"""

from __future__ import annotations

import json
import os
import secrets
import shlex
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

POLL = {"interval_s": 0.05, "timeout_s": 0.5, "stale_after_s": 0.5, "unhealthy_after_failures": 3}
TOKEN_ENV = "FLATSHARE_ADMIN_TOKEN"  # the gateway CLI's --admin-token, from the environment
COUNTER_FAMILY = "flatshare_gateway_baseline_counter"  # flatshare.gateway.telemetry


class Gated(Protocol):
    """What a gateway is built from: a condition's key and its gateway-side baseline
    (`flatshare.colocation.experiment.Condition`, not imported: it imports this module's users)."""

    @property
    def key(self) -> str: ...

    @property
    def gate(self) -> str | None: ...

    @property
    def gate_settings(self) -> Mapping[str, Any] | None: ...


@dataclass(frozen=True)
class GatewaySpec:
    """One `flatshare gateway` with a baseline (`flatshare.testing.vllm_server.ServerSpec`): `settings`
    is its config file's table; `backend` (the engine's URL) and `config_path` (where that file is) are
    placeholders until `written` sets them."""

    settings: Mapping[str, Any]
    backend: str = "URL"
    config_path: Path = Path("gateway.json")
    admin_token: str = field(default_factory=lambda: secrets.token_urlsafe(24), repr=False)
    startup_timeout_s: float = 60.0
    engine_niceness: int = 0
    host: str = "127.0.0.1"
    label: str = "gateway"

    def command(self, port: int) -> list[str]:
        return [
            sys.executable, "-m", "flatshare.cli", "gateway", "--config", str(self.config_path),
            "--backend", self.backend, "--host", self.host, "--port", str(port),
        ]  # fmt: skip

    def environment(self) -> dict[str, str]:
        return {**os.environ, "PYTHONUNBUFFERED": "1", TOKEN_ENV: self.admin_token}

    def written(self, folder: Path, backend: str) -> GatewaySpec:
        """This gateway in front of `backend`, its config file written into `folder`."""
        path = folder / "gateway.json"
        path.write_text(json.dumps(dict(self.settings), indent=2, sort_keys=True) + "\n")
        return replace(self, backend=backend, config_path=path)

    def shell_line(self, backend_port: str = "PORT", port: str = "GATEWAY_PORT") -> str:
        """The command as one shell line (`--dry-run`): the engine's and the gateway's ports as placeholders,
        the config file's table after it."""
        words = ["python", *self.command(0)[1:]]
        placeholders = {"--port": f"${port}", "--backend": f"http://127.0.0.1:${backend_port}"}
        for flag, value in placeholders.items():
            words[words.index(flag) + 1] = value
        words[words.index("--config") + 1] = "gateway.json"
        line = " ".join(w if w in placeholders.values() else shlex.quote(w) for w in words)
        table = json.dumps(dict(self.settings), sort_keys=True, separators=(", ", ": "))
        return f"{TOKEN_ENV}=<made for the run> {line}  # gateway.json: {table}"


def gateway_spec(condition: Gated) -> GatewaySpec | None:
    """The gateway a condition runs behind (None: an engine-side condition); a ValueError naming the
    condition when its gate or settings are not a baseline's."""
    from flatshare.policy.gates import make_settings

    if condition.gate is None:
        return None
    settings = dict(condition.gate_settings or {})
    try:
        make_settings(condition.gate, settings)
    except ValueError as exc:
        raise ValueError(f"{condition.key}: {exc}") from None
    table = {
        "baseline": condition.gate,
        "baseline_settings": settings,
        "poll": POLL,
        "tokens": {"source": "estimate"},
    }
    return GatewaySpec(table)


def gate_counters(metrics_text: str) -> dict[str, float]:
    """The baseline's counters on a gateway's `/metrics` page (`COUNTER_FAMILY`), by counter name."""
    from prometheus_client.parser import text_string_to_metric_families

    return {
        sample.labels["counter"]: sample.value
        for family in text_string_to_metric_families(metrics_text)
        if family.name == COUNTER_FAMILY
        for sample in family.samples
        if "counter" in sample.labels
    }
