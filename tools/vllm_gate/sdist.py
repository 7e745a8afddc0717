"""The vLLM release sdist for the gate: fetched from PyPI with pip, its `tests/` (and, for a release with
no installable CPU build here, its `vllm/` sources and a throwaway venv to import them in)."""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SDIST_CACHE = REPO / ".cache" / "vllm-sdist"
GATE_CACHE = REPO / ".cache" / "vllm-gate"


def fetch_sdist(version: str) -> Path:
    """Download `vllm-<version>.tar.gz` from PyPI with pip, unless it is already cached.

    `--no-build-isolation`: pip prepares the sdist's metadata even for `download`, and in an isolated
    build it cannot resolve vLLM's pinned torch here; with the target interpreter's own torch it can.
    The metadata step also imports setuptools-rust and setuptools-scm (installed to a side folder), and
    `VLLM_TARGET_DEVICE=empty` would append `+empty` to the version, hence `VLLM_VERSION_OVERRIDE`.
    Runs with this interpreter (the project's venv, which has torch).
    """
    python = sys.executable
    folder = SDIST_CACHE / version
    tarball = folder / f"vllm-{version}.tar.gz"
    if tarball.exists():
        return tarball
    build_deps = GATE_CACHE / "build-deps"
    if not build_deps.exists():
        pip = [python, "-m", "pip", "install", "--quiet", "--target", str(build_deps)]
        subprocess.run([*pip, "setuptools-rust", "setuptools-scm"], check=True)
    env = os.environ | {
        "PYTHONPATH": str(build_deps),
        "VLLM_TARGET_DEVICE": "empty",
        "VLLM_VERSION_OVERRIDE": version,
    }
    download = [python, "-m", "pip", "download", f"vllm=={version}", "--no-deps", "--no-binary", ":all:"]
    subprocess.run([*download, "--no-build-isolation", "-d", str(folder)], check=True, env=env)
    return tarball


def extract_tests(tarball: Path, version: str) -> Path:
    """Extract `tests/` only, into `<cache>/root/tests`, with a blank pytest.ini so that no other
    project's pytest settings apply. Returns the root."""
    root = tarball.parent / "root"
    if not (root / "tests" / "v1" / "core").is_dir():
        prefix = f"vllm-{version}/tests/"
        with tarfile.open(tarball) as archive:
            members = [m for m in archive.getmembers() if m.name.startswith(prefix)]
            for member in members:
                member.name = member.name.removeprefix(f"vllm-{version}/")
            archive.extractall(root, members=members, filter="data")
    (root / "pytest.ini").write_text("[pytest]\n")
    return root


def extract_source(tarball: Path, version: str) -> Path:
    """Extract the sdist's `vllm/` package and `requirements/` into `<cache>/pkg` (for `--sdist-venv`)."""
    pkg = tarball.parent / "pkg"
    if not (pkg / "vllm" / "v1" / "core").is_dir():
        prefix = f"vllm-{version}/"
        wanted = (prefix + "vllm/", prefix + "requirements/")
        with tarfile.open(tarball) as archive:
            members = [m for m in archive.getmembers() if m.name.startswith(wanted)]
            for member in members:
                member.name = member.name.removeprefix(prefix)
            archive.extractall(pkg, members=members, filter="data")
    return pkg


def sdist_venv(venv: Path, pkg: Path) -> str:
    """A throwaway venv that imports vLLM from the sdist's Python sources (no kernels built): CPU torch
    2.13.0 (the one this machine has), vLLM's `requirements/common.txt`, numba and the test tools.
    Returns its interpreter. The run sets `VLLM_TARGET_DEVICE=cpu` so vLLM picks its CPU platform."""
    python = venv / "bin" / "python"
    stamp = venv / ".vllm-gate-installed"
    if not stamp.exists():
        subprocess.run(["python3.11", "-m", "venv", str(venv)], check=True)
        pip = [str(python), "-m", "pip", "install", "--quiet"]
        subprocess.run([*pip, "torch==2.13.0"], check=True)
        tools = ["numba", "pytest", "pytest-timeout", "tblib"]
        subprocess.run([*pip, "-r", str(pkg / "requirements" / "common.txt"), *tools], check=True)
        stamp.touch()
    return str(python)


def test_deps(version: str, python: str) -> Path:
    """A side folder with test-only imports the target interpreter lacks (vLLM's conftest needs tblib)."""
    folder = GATE_CACHE / f"deps-{version}"
    has_tblib = subprocess.run([python, "-c", "import tblib"], capture_output=True).returncode == 0
    if not has_tblib and not (folder / "tblib").exists():
        pip = [python, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(folder)]
        subprocess.run([*pip, "tblib"], check=True)
    return folder
