"""The simulator beside a real co-location run: the same scaled workload on the simulated engine with a
profile calibrated on the same server, and where the two agree, against the real-vs-real noise.

`calibrate_on_run(real_out, profile)` starts a server with the arguments a real run recorded
(`engine.json`'s `server_args`, stock vLLM's condition), probes it with `flatshare calibrate-engine`'s
code and writes the profile to `profile` (a user path: never into the package), then stops it.
`sim_beside_real(real_out, profile, out)` runs every (condition, callers, seed) of the real experiment
again on the simulator, from the facts each real run saved (its setup, scale included, which is the
setup the real engine ran: `RealEngine.real_setup`; its workload; its duration), with `profile`'s own
API-server time, into `out` (an experiment folder of its own, `flatshare report` reads it), and returns
the agreement table: for each condition and measure the real value of the first seed, of the second
seed when there is one (their difference is the real-vs-real noise: the same experiment, another
draw of the workload), and the simulator's on the first seed.
"""

from __future__ import annotations

import dataclasses
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flatshare.colocation.experiment import ColocationPlan, pick_conditions, run_one
from flatshare.colocation.runs import SavedRun, load_runs
from flatshare.colocation.setup import Setup
from flatshare.colocation.summary import summarize
from flatshare.errors import InputError

MEASURES = (
    ("voice_ttft_mean_s", "voice TTFT mean s"),
    ("voice_first_sentence_mean_s", "voice first sentence mean s"),
    ("voice_turn_p95_s", "voice turn p95 s"),
    ("agent_tokens_per_s", "agents' tokens/s"),
    ("preemptions", "preemptions"),
)
_AGENTS = re.compile(r"agents=([0-9]+)")


@dataclass(frozen=True)
class Agreement:
    """One measure of one condition: real (first seed), real (second seed, or None), simulated (first
    seed); `noise` and `error` are relative to the first real seed (None where it is 0 or missing)."""

    condition: str
    measure: str
    real: float | None
    real_again: float | None
    sim: float | None

    @property
    def noise(self) -> float | None:
        return _relative(self.real_again, self.real)

    @property
    def error(self) -> float | None:
        return _relative(self.sim, self.real)

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self) | {"noise": self.noise, "error": self.error}


def _relative(value: float | None, reference: float | None) -> float | None:
    if value is None or not reference:
        return None
    return (value - reference) / reference


def _plan_of(run: SavedRun, profile: str) -> tuple[ColocationPlan, Any]:
    facts = run.engine
    setup_data, spec = facts.get("setup"), facts.get("spec")
    if not isinstance(setup_data, dict) or not isinstance(spec, str) or not _AGENTS.search(spec):
        raise InputError(f"run {run.condition}/c{run.callers}/s{run.seed}: engine.json has no setup or spec")
    setup = Setup(**setup_data).with_changes(profile=profile, api_latency_s=None)
    (condition,) = pick_conditions(run.condition)
    agents = int(_AGENTS.search(spec)[1])  # type: ignore[index]
    plan = ColocationPlan(
        callers=(run.callers,),
        agents=agents,
        seeds=run.seed + 1,
        duration_s=float(facts["duration_s"]),
        setup=setup,
        conditions=(condition,),
        workers=1,
    )
    return plan, condition


def sim_beside_real(real_out: Path, profile: str, out: Path) -> list[Agreement]:
    """Run the real experiment's runs on the simulator into `out` and compare (module docstring)."""
    real = load_runs(real_out)
    if not real:
        raise InputError(f"{real_out}: no saved runs")
    for run in real:
        if (run.engine.get("engine") or {}).get("kind") != "vllm":
            raise InputError(f"{real_out}: run {run.condition} seed {run.seed} is not a real-engine run")
    for run in real:
        plan, condition = _plan_of(run, profile)
        run_one(out, condition, run.callers, run.seed, plan)
    table = agreement(real, load_runs(out))
    (out / "beside.json").write_text(json.dumps([a.to_json() for a in table], indent=2) + "\n")
    (out / "beside.md").write_text("\n".join(beside_lines(table, profile)) + "\n")
    return table


def _by_seed(runs: list[SavedRun], seed: int) -> dict[str, Any]:
    chosen = [r for r in runs if r.seed == seed]
    if not chosen:
        return {}
    first = min(r.callers for r in chosen)
    return dict(summarize([r for r in chosen if r.callers == first]).conditions)


def agreement(real: list[SavedRun], sim: list[SavedRun]) -> list[Agreement]:
    """The table of `sim_beside_real` from saved runs: seeds 0 and 1 of the real ones, seed 0 simulated."""
    first, second, simulated = _by_seed(real, 0), _by_seed(real, 1), _by_seed(sim, 0)
    rows = []
    for condition in sorted(first):
        for field, label in MEASURES:
            rows.append(
                Agreement(
                    condition,
                    label,
                    getattr(first[condition], field),
                    getattr(second[condition], field) if condition in second else None,
                    getattr(simulated[condition], field) if condition in simulated else None,
                )
            )
    return rows


def _cell(value: float | None, percent: bool = False) -> str:
    if value is None:
        return "-"
    return f"{value:+.0%}" if percent else f"{value:.3f}"


def beside_lines(table: list[Agreement], profile: str) -> list[str]:
    """The agreement table in markdown."""
    lines = [
        f"Simulator (profile `{profile}`) beside the real engine, same scaled workload. `noise`: the real "
        "run's second seed against its first; `sim vs real`: the simulator against the real first seed.",
        "",
        "| condition | measure | real seed 0 | real seed 1 | noise | sim seed 0 | sim vs real |",
        "|---|---|---|---|---|---|---|",
    ]
    for a in table:
        lines.append(
            f"| {a.condition} | {a.measure} | {_cell(a.real)} | {_cell(a.real_again)} | "
            f"{_cell(a.noise, True)} | {_cell(a.sim)} | {_cell(a.error, True)} |"
        )
    return lines


def calibrate_on_run(
    real_out: Path, profile: Path, condition: str = "vllm-priority", quick: bool = True
) -> Path:
    """Start a server with `condition`'s recorded arguments, calibrate a profile on it into `profile`
    (`flatshare calibrate-engine`'s code), stop it; returns `profile`."""
    from flatshare.colocation.servers import CPU_ENV, GPU_ENV, ServeSpec
    from flatshare.fidelity.command import calibrate_engine_command
    from flatshare.testing.vllm_server import VllmServer

    runs = [r for r in load_runs(real_out) if r.condition == condition]
    if not runs:
        raise InputError(f"{real_out}: no {condition} run to calibrate on")
    facts = runs[0].engine
    args, engine = facts.get("server_args"), facts.get("engine") or {}
    if not isinstance(args, list) or engine.get("kind") != "vllm":
        raise InputError(f"{real_out}: {condition} is not a real-engine run (no server_args)")
    cpu = engine.get("device") == "cpu"
    spec = ServeSpec(tuple(str(a) for a in args), CPU_ENV if cpu else GPU_ENV, 600.0, 10 if cpu else 0)
    budget = int(args[args.index("--max-num-batched-tokens") + 1])
    vocab = _vocab(runs[0])
    with VllmServer(spec) as server:
        calibrate_engine_command(
            server.url, profile, max_num_batched_tokens=budget, vocab_size=vocab, quick=quick
        )
    return profile


def _vocab(run: SavedRun) -> int:
    from flatshare.colocation.servers import model_vocab

    model = (run.engine.get("engine") or {}).get("model")
    return model_vocab(str(model)) or 32000 if model else 32000
