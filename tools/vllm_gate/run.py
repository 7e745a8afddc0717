"""vLLM's own scheduler tests as a gate for make-room.

    python tools/vllm_gate/run.py --vllm 0.32.0 --python .venv/bin/python     (what `make vllm-gate` runs)

1. Fetches the vLLM release sdist from PyPI with pip (into `.cache/vllm-sdist/<version>/`, git-ignored) and
   extracts only its `tests/` tree (no `vllm/` package beside it, so the tests import the installed vLLM).
2. Runs the scheduler test files of `tests/v1/core` once per mode, each in its own pytest process with
   `gate_plugin.py` loaded: `stock` (vLLM's classes), `disabled`, `enabled`, `hold-decode` (make-room
   subclasses; see the plugin). Per-test outcomes land in `.cache/vllm-gate/results/<version>/<mode>.json`.
3. Compares per-test outcomes with `stock`: `disabled` must match it exactly; every difference of
   `enabled` / `hold-decode` must be listed in `intended_differences.toml` with a reason. Exits 1 on any
   undocumented difference, or when a mode produced no results. `stock` runs first; the other modes skip
   the tests that failed in it for environment reasons (ENV_FAILURES) and take stock's outcome for them
   ("not run" in the counts). `--modes disabled,enabled,hold-decode` reuses the saved stock run (stock
   does not depend on make-room's code).

Tests that need what this machine lacks (CUDA, multimodal processors, a tokenizer from the Hub) fail in
every mode alike; the gate compares modes, so they cancel out, and the counts show how many there are.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tomllib
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(HERE))

from gate_plugin import GATED_MODES, MODES  # noqa: E402
from hf_stub import write_cache  # noqa: E402
from sdist import GATE_CACHE, extract_source, extract_tests, fetch_sdist, sdist_venv, test_deps  # noqa: E402

DIFFERENCES = HERE / "intended_differences.toml"

# The files under tests/v1/core that build schedulers (scheduler, async scheduler, priority scheduling,
# prefix caching, deferred block free, and the smaller ones that also drive a Scheduler).
DEFAULT_FILES = (
    "test_scheduler.py",
    "test_async_scheduler.py",
    "test_priority_preemption_bug.py",
    "test_priority_scheduler_random.py",
    "test_prefix_caching.py",
    "test_deferred_block_free.py",
    "test_prefix_replay.py",
    "test_swa_inflight_window_free.py",
    "test_worker_slot_overflow.py",
)
OUTCOMES = ("passed", "failed", "error", "skipped", "xfailed", "xpassed")
# Failure messages that mean "this machine lacks it" (no Hub access for models the stub cache does not
# hold; multimodal processors need torchvision, which the project's venv removes): the same in every mode.
ENV_FAILURES = (
    "Invalid repository ID or local directory specified",
    "failed to be inspected",
    "No module named 'torchvision'",
)


# -- running the modes -----------------------------------------------------------------------------------
def code_state() -> dict[str, Any]:
    """Which make-room code a run measured: HEAD, the uncommitted diff stat, and file hashes."""
    scheduler = REPO / "src" / "flatshare" / "scheduler"

    def git(*args: str) -> str:
        done = subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True)
        return done.stdout.strip()

    digest = hashlib.sha256()
    for path in sorted(scheduler.glob("*.py")):
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return {
        "head": git("rev-parse", "--short", "HEAD"),
        "diff_stat": git("diff", "--stat", "--", "src/flatshare/scheduler"),
        "untracked": git("ls-files", "--others", "--exclude-standard", "--", "src/flatshare/scheduler"),
        "sha256": digest.hexdigest()[:16],
    }


@dataclass(frozen=True)
class Setup:
    python: str
    root: Path
    results: Path
    pythonpath: str
    hf_home: Path
    files: tuple[str, ...]
    timeout: int
    env: tuple[tuple[str, str], ...] = ()


def env_failures(stock: dict[str, Any]) -> list[str]:
    """Tests that failed in `stock` for want of something this machine lacks (see ENV_FAILURES)."""
    return sorted(
        test
        for test, entry in stock["tests"].items()
        if entry["outcome"] in ("failed", "error") and any(p in entry["message"] for p in ENV_FAILURES)
    )


def run_mode(setup: Setup, mode: str, stock: dict[str, Any] | None) -> dict[str, Any]:
    """One pytest process for `mode`. Given `stock`, its environment failures are not run again: they
    get stock's outcome, marked `not_run`."""
    outcomes = setup.results / f"{mode}.json"
    outcomes.unlink(missing_ok=True)
    skipped = env_failures(stock) if stock is not None and mode != "stock" else []
    skipped = [test for test in skipped if _file_of(test) in setup.files]
    deselect = setup.results / f"{mode}.deselect"
    deselect.write_text("".join(f"{test}\n" for test in skipped))
    env = os.environ | {
        "VLLM_GATE_MODE": mode,
        "VLLM_GATE_OUTCOMES": str(outcomes),
        "VLLM_GATE_DESELECT": str(deselect),
        "PYTHONPATH": setup.pythonpath,
        "HF_HOME": str(setup.hf_home),
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "OMP_NUM_THREADS": "1",
        # make-room refuses vLLM releases it was not tested with; the gate is how one tests them.
        "FLATSHARE_ALLOW_UNTESTED_VLLM": "1",
        **dict(setup.env),
    }
    args = ["-c", "pytest.ini", "--rootdir", ".", "-p", "no:cacheprovider", "-p", "gate_plugin", "-q"]
    args += ["-rN", f"--timeout={setup.timeout}"]
    paths = [f"tests/v1/core/{name}" for name in setup.files]
    before = code_state()
    with (setup.results / f"{mode}.log").open("w") as out:
        done = subprocess.run(
            [setup.python, "-m", "pytest", *args, *paths], cwd=setup.root, env=env, stdout=out, stderr=out
        )
    after = code_state()
    data: dict[str, Any] = {"mode": mode, "exitstatus": done.returncode, "tests": {}}
    if outcomes.exists():
        data = json.loads(outcomes.read_text())
    if data["tests"] and stock is not None:
        for test in skipped:
            data["tests"][test] = {**stock["tests"][test], "not_run": True}
    # pytest imports make-room once, seconds after `before`: that is the code measured, unless it changed
    data["code_state"] = before if before == after else {**before, "changed_during_run": after}
    data["files"] = list(setup.files)
    outcomes.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    return data


# -- comparing ------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Difference:
    mode: str
    test: str
    stock: str
    got: str
    message: str
    reason: str | None


def load_intended(version: str) -> dict[tuple[str, str], str]:
    """`(mode, test id) -> reason` from intended_differences.toml, for entries that apply to `version`."""
    data = tomllib.loads(DIFFERENCES.read_text()) if DIFFERENCES.exists() else {}
    intended: dict[tuple[str, str], str] = {}
    for entry in data.get("difference", []):
        unknown = set(entry) - {"mode", "test", "reason", "versions"}
        if unknown or not {"mode", "test", "reason"} <= set(entry):
            raise SystemExit(f"{DIFFERENCES.name}: bad entry {entry} (keys: mode, test, reason, versions)")
        modes = entry["mode"] if isinstance(entry["mode"], list) else [entry["mode"]]
        if not set(modes) <= set(GATED_MODES) - {"stock", "disabled"}:
            raise SystemExit(f"{DIFFERENCES.name}: mode must be enabled or hold-decode: {entry}")
        if version in entry.get("versions", [version]):
            for mode in modes:
                intended[(mode, entry["test"])] = entry["reason"]
    return intended


def _file_of(test: str) -> str:
    return test.split("::", 1)[0].rsplit("/", 1)[-1]


def differences(
    stock: dict[str, Any], other: dict[str, Any], intended: dict[tuple[str, str], str]
) -> Iterator[Difference]:
    mode = other["mode"]
    files = other.get("files")  # a run of some files only is compared on those files
    base = {t: e for t, e in stock["tests"].items() if files is None or _file_of(t) in files}
    got = other["tests"]
    for test in sorted(set(base) | set(got)):
        before = base.get(test, {"outcome": "absent", "message": ""})
        after = got.get(test, {"outcome": "absent", "message": ""})
        if before["outcome"] != after["outcome"]:
            message = after["message"] or before["message"]
            yield Difference(
                mode, test, before["outcome"], after["outcome"], message, intended.get((mode, test))
            )


def results_dir(version: str) -> Path:
    return GATE_CACHE / "results" / version


def report(version: str, runs: dict[str, dict[str, Any]], intended: dict[tuple[str, str], str]) -> int:
    print(f"\nvLLM {version}: per-test outcomes by mode")
    header = "".join(f"{name:>9}" for name in (*OUTCOMES, "not run"))
    print(f"{'mode':<12}{header}    make-room code state")
    for mode, data in runs.items():
        counts = Counter(entry["outcome"] for entry in data["tests"].values())
        counts["not run"] = sum(1 for entry in data["tests"].values() if entry.get("not_run"))
        state = data.get("code_state", {})
        dirty = "clean" if not state.get("diff_stat") and not state.get("untracked") else "uncommitted"
        where = f"{state.get('head')} {dirty} sha256:{state.get('sha256')}"
        if isinstance(changed := state.get("changed_during_run"), dict):
            where += (
                f" (changed during the run: {changed.get('head')} sha256:{changed.get('sha256')} at its end)"
            )
        print(f"{mode:<12}" + "".join(f"{counts[n]:>9}" for n in (*OUTCOMES, "not run")) + f"    {where}")
    for mode, data in runs.items():
        if data.get("built"):
            built = ", ".join(f"{n} {name}" for name, n in sorted(data["built"].items()))
            print(f"  {mode}: make-room schedulers built: {built}")
    bad = 0
    for mode, data in runs.items():
        if not data["tests"]:
            print(f"\n{mode}: no results (pytest exit {data.get('exitstatus')}); see its log")
            bad += 1
    stock = runs.get("stock")
    saved = results_dir(version) / "stock.json"
    if stock is None and saved.exists():
        stock = json.loads(saved.read_text())
        print(f"\nstock: compared with the saved run ({saved})")
    if stock is None:
        return 1 if bad else 0
    seen: set[tuple[str, str]] = set()
    for mode, data in runs.items():
        if mode == "stock":
            continue
        found = list(differences(stock, data, intended))
        print(f"\n{mode}: {len(found)} difference(s) from stock")
        for diff in found:
            seen.add((mode, diff.test))
            if mode not in GATED_MODES:
                tag = "diagnostic"
            else:
                tag = "intended" if diff.reason and mode != "disabled" else "UNDOCUMENTED"
            bad += tag == "UNDOCUMENTED"
            print(f"  [{tag}] {diff.test}: {diff.stock} -> {diff.got}")
            print(f"      {diff.reason or diff.message}")
    for mode, test in sorted(set(intended) - seen):
        if mode in runs:
            print(f"note: listed in {DIFFERENCES.name} but not different now: [{mode}] {test}")
    print(f"\nvllm-gate {version}: {'FAIL' if bad else 'ok'} ({bad} problem(s))")
    return 1 if bad else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--vllm", default="0.32.0", help="vLLM release whose sdist tests to run")
    parser.add_argument(
        "--python", default=str(REPO / ".venv" / "bin" / "python"), help="interpreter with that vLLM"
    )
    parser.add_argument(
        "--sdist-venv",
        type=Path,
        help="import vLLM from the sdist's sources in this venv (built if missing) instead of --python",
    )
    parser.add_argument(
        "--modes", default=",".join(GATED_MODES), help="comma-separated, from: " + ", ".join(MODES)
    )
    parser.add_argument("--files", nargs="*", default=list(DEFAULT_FILES), help="files under tests/v1/core")
    parser.add_argument("--jobs", type=int, default=2, help="modes run at once (one pytest process each)")
    parser.add_argument("--timeout", type=int, default=300, help="per-test timeout, seconds")
    parser.add_argument("--compare-only", action="store_true", help="compare the saved results, run nothing")
    args = parser.parse_args(argv)
    modes = [m for m in args.modes.split(",") if m]
    if unknown := set(modes) - set(MODES):
        parser.error(f"unknown mode(s) {sorted(unknown)}")
    results = results_dir(args.vllm)
    results.mkdir(parents=True, exist_ok=True)
    intended = load_intended(args.vllm)
    if args.compare_only:
        saved_runs = [results / f"{m}.json" for m in modes]
        return report(
            args.vllm, {p.stem: json.loads(p.read_text()) for p in saved_runs if p.exists()}, intended
        )
    tarball = fetch_sdist(args.vllm)
    root = extract_tests(tarball, args.vllm)
    python, source = os.path.abspath(args.python), ""  # pytest runs in the sdist root
    env: tuple[tuple[str, str], ...] = ()
    if args.sdist_venv is not None:
        source = str(extract_source(tarball, args.vllm))
        python, env = sdist_venv(args.sdist_venv, Path(source)), (("VLLM_TARGET_DEVICE", "cpu"),)
    paths = [source, str(HERE), str(REPO / "src"), str(test_deps(args.vllm, python))]
    setup = Setup(
        python=python,
        root=root,
        results=results,
        pythonpath=os.pathsep.join(p for p in paths if p),
        hf_home=write_cache(GATE_CACHE / "hf"),
        files=tuple(args.files),
        timeout=args.timeout,
        env=env,
    )
    print(f"vllm-gate {args.vllm}: {len(setup.files)} files, modes {modes}; logs in {results}", flush=True)
    runs: dict[str, dict[str, Any]] = {}
    if "stock" in modes:
        runs["stock"] = run_mode(setup, "stock", None)
    saved = results / "stock.json"
    stock = runs.get("stock") or (json.loads(saved.read_text()) if saved.exists() else None)
    others = [mode for mode in modes if mode != "stock"]
    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        done = pool.map(lambda mode: run_mode(setup, mode, stock), others)
        runs.update(zip(others, done, strict=True))
    return report(args.vllm, runs, intended)


if __name__ == "__main__":
    sys.exit(main())
