"""`fidelity.json` and `report.md` of a fidelity run (and the CDF figure beside them).

`fidelity.json` (version 1): `meta` (workload spec and seed, scheduler, the simulator's engine
settings, the profile, the server's settings and any `mismatches` between the two, the bounds),
`runs` (per run: folder, metrics of `flatshare.fidelity.measures`, client-side means, and for real runs
the server's own means), `rows` (`flatshare.fidelity.compare.Row`s), `verdict`, and `diagnostics`:
the profile's fitted request latency and how the TTFT errors would read with it added to the simulator.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flatshare.fidelity.compare import Row, relative, verdict
from flatshare.fidelity.figures import cdf_figure
from flatshare.fidelity.measures import means
from flatshare.fidelity.runs import RunData

REPORT_VERSION = 1
FIGURE = "cdf.png"


@dataclass(frozen=True)
class FidelityResult:
    meta: dict[str, Any]
    real: list[RunData]
    sim: RunData
    rows: list[Row]
    request_latency_s: float | None

    @property
    def verdict(self) -> bool:
        return verdict(self.rows)

    def worst(self) -> Row | None:
        """The checked row furthest beyond its bound (or nearest to it, if all are within)."""
        checked = [r for r in self.rows if r.checked and r.sim_error is not None]
        return max(checked, key=lambda r: abs(r.sim_error or 0) / r.bound, default=None)


def diagnostics(result: FidelityResult) -> dict[str, Any]:
    """TTFT errors with the profile's request latency added to every simulated TTFT (a shift)."""
    latency = result.request_latency_s
    if not latency:
        return {"request_latency_s": latency}
    shifted = {}
    for row in result.rows:
        if row.quantity.startswith("ttft") and row.sim is not None:
            shifted[f"{row.cls} {row.quantity}"] = relative(row.sim + latency, row.real[0])
    return {"request_latency_s": latency, "ttft_error_with_request_latency": shifted}


def write_report(out: Path, result: FidelityResult) -> dict[str, Any]:
    """Write fidelity.json, report.md and the figure into `out`; returns the JSON written."""
    runs = [*result.real, result.sim]
    data = {
        "version": REPORT_VERSION,
        "meta": result.meta,
        "runs": {
            run.name: {
                "folder": str(run.folder),
                **run.metrics.to_json(),
                "client_means": means(run.records),
                "server_means": run.server_means,
            }
            for run in runs
        },
        "rows": [r.to_json() for r in result.rows],
        "verdict": result.verdict,
        "diagnostics": diagnostics(result),
    }
    (out / "fidelity.json").write_text(json.dumps(data, indent=2) + "\n")
    title = f"{result.meta['spec']} / {result.meta['scheduler']} / profile {result.meta['profile']['name']}"
    cdf_figure(result.real, result.sim, out / FIGURE, title)
    (out / "report.md").write_text(_markdown(result, data))
    return data


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value * 1e3:.1f}"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:+.0%}"


def _value(row: Row, value: float | None) -> str:
    if row.quantity == "preemptions":
        return "-" if value is None else f"{value:.0f}"
    if row.quantity == "kv_use_mean":
        return "-" if value is None else f"{value:.1%}"
    return _ms(value)


def _markdown(result: FidelityResult, data: dict[str, Any]) -> str:
    meta = result.meta
    names = [r.name for r in result.real]
    head = " | ".join(names)
    lines = [
        f"# Simulator fidelity: {meta['spec']} (seed {meta['seed']}), scheduler {meta['scheduler']}",
        "",
        f"Profile `{meta['profile']['name']}`; server {meta['server'].get('url')}; engine "
        f"{json.dumps(meta['engine'], sort_keys=True)}.",
    ]
    if meta.get("mismatches"):
        lines += ["", f"**Settings differ from the server's:** {'; '.join(meta['mismatches'])}."]
    lines += [
        "",
        f"Times in ms. Reference: {names[0]}. real-vs-real: the largest difference of the other real runs "
        f"from it; bound = max({meta['bounds']['floor']:.0%}, {meta['bounds']['k']:g} x real-vs-real). "
        "`*`: checked. tpot: a request's mean gap between tokens.",
        "",
        f"| class | quantity | {head} | sim | real-vs-real | sim-vs-real | bound | ok |",
        "|---|---|" + "---|" * (len(names) + 5),
    ]
    for row in result.rows:
        reals = " | ".join(_value(row, v) for v in row.real)
        mark = "*" if row.checked else ""
        lines.append(
            f"| {row.cls} | {row.quantity}{mark} | {reals} | {_value(row, row.sim)} | {_pct(row.noise)} | "
            f"{_pct(row.sim_error)} | {row.bound:.0%} | {'yes' if row.ok else 'NO'} |"
        )
    lines += [
        "",
        "Means over all requests, ms (server: vLLM's own histograms, before the HTTP response):",
        "",
    ]
    lines += ["| run | TTFT client | TTFT server | gap client | ITL server | e2e client | e2e server |"]
    lines += ["|---|---|---|---|---|---|---|"]
    for name, run in data["runs"].items():
        c, s = run["client_means"], run["server_means"]
        lines.append(
            f"| {name} | {_ms(c.get('ttft'))} | {_ms(s.get('ttft'))} | {_ms(c.get('itl'))} | "
            f"{_ms(s.get('itl'))} | {_ms(c.get('e2e'))} | {_ms(s.get('e2e'))} |"
        )
    diag = data["diagnostics"]
    if diag.get("ttft_error_with_request_latency"):
        shifted = ", ".join(f"{k} {_pct(v)}" for k, v in diag["ttft_error_with_request_latency"].items())
        lines += [
            "",
            f"The profile's fitted API-server latency is {_ms(diag['request_latency_s'])} ms per request, but "
            f"the profile does not apply it (`api_latency_s` 0). With it added to every simulated TTFT: "
            f"{shifted}.",
        ]
    worst = result.worst()
    verdict_line = "within bounds" if result.verdict else "OUT OF BOUNDS"
    if worst is not None:
        verdict_line += (
            f" (worst: {worst.cls} {worst.quantity} {_pct(worst.sim_error)}, bound {worst.bound:.0%})"
        )
    lines += ["", f"Verdict: **{verdict_line}**.", "", f"![CDFs]({FIGURE})", ""]
    return "\n".join(lines)
