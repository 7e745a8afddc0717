"""`flatshare gateway` and `flatshare calibrate-thresholds`: the command bodies, with plain arguments.

The CLI (`flatshare.cli.gateway`) maps its options onto these functions and turns `InputError` into
a one-line error (exit 2). Options map onto the config file's keys (`--backend` replaces the file's
`backends`; the others replace the key of the same name), so there is one source of truth
(`config.py`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from flatshare.policy.calibrate import Calibration


def backend_entry(text: str) -> dict[str, str]:
    """`URL` or `NAME=URL` as a `backends` table entry."""
    name, sep, url = text.partition("=")
    if sep and not name.startswith(("http://", "https://")):
        return {"name": name, "url": url}
    return {"url": text}


def gateway_command(
    *,
    backends: Sequence[str] = (),
    port: int | None = None,
    host: str | None = None,
    policy: str | None = None,
    config: Path | None = None,
    audit_log: Path | None = None,
    admin_token: str | None = None,
    access_log: str = "off",
) -> None:
    """Serve the gateway with `config`'s settings under the given ones (None: the file's or the
    default) until interrupted. InputError on bad settings, before it listens. `access_log`: off, or
    `flatshare.serving`'s other modes."""
    from flatshare.gateway.configfile import load_config
    from flatshare.serving import check_access_log

    check_access_log(access_log)

    overrides: dict[str, Any] = {
        "backends": [backend_entry(b) for b in backends] if backends else None,
        "port": port,
        "host": host,
        "policy": policy,
        "audit_log": str(audit_log) if audit_log is not None else None,
        "admin_token": admin_token,
    }
    settings = load_config(config, overrides)
    from flatshare.gateway.server import gateway_main

    gateway_main(settings, access_log=access_log)


@dataclass(frozen=True)
class CalibrateSummary:
    """What `calibrate_command` found, and where it saved it."""

    result: Calibration
    source: str
    saved_into: Path | None

    def lines(self) -> list[str]:
        """The thresholds as a `[thresholds]` table, with comments saying what they rest on."""
        r, t = self.result, self.result.thresholds
        lines = [
            f"# from {r.token_samples} requests and {r.kv_samples} KV readings up to t={r.cutoff_t:.3f}",
            f"[thresholds]\nkv_usage = {t.kv_usage}\ninput_tokens = {t.input_tokens}",
            f"calibrated_from = {json.dumps(self.source)}",
        ]
        if self.saved_into is not None:
            lines.append(f"# saved into {self.saved_into}")
        return lines


def calibrate_command(
    runs: Sequence[Path],
    *,
    fraction: float = 0.2,
    input_percentile: float = 90.0,
    kv_percentile: float = 80.0,
    config: Path | None = None,
) -> CalibrateSummary:
    """Threshold-rule thresholds from the leading `fraction` of the recorded `runs`, saved into the
    existing `config` file's `[thresholds]` table when given (InputError on bad input)."""
    from flatshare.gateway.calibrate_inputs import load_samples
    from flatshare.gateway.calibrate_save import save_thresholds
    from flatshare.policy.calibrate import calibrate_thresholds

    source = ", ".join(str(p) for p in runs)
    result = calibrate_thresholds(load_samples(list(runs)), fraction, input_percentile, kv_percentile, source)
    if config is not None:
        save_thresholds(config, result.thresholds)
    return CalibrateSummary(result, source, config)
