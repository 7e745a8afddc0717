"""The gateway's Dockerfile: pinned base, non-root, only what the gateway imports (no vLLM, no torch), the
port and user the manifests expect; built where a container builder runs."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tomllib
from importlib.metadata import PackageNotFoundError, packages_distributions, requires
from importlib.metadata import version as installed_version
from pathlib import Path

import pytest
from deploykit import DEPLOY, KUBERNETES, REPO

DOCKERFILE = REPO / "Dockerfile"
REQUIREMENTS = DEPLOY / "docker" / "gateway-requirements.txt"
NOT_IN_IMAGE = ("vllm", "torch", "numpy", "scipy", "matplotlib", "transformers", "ray")
# Imports the gateway's command and modules with every third-party module outside `allowed` blocked, as
# in an image holding only the pinned requirements and their own (non-extra) dependencies; prints the
# upstream client `auto` picks there.
BLOCKED_IMPORT = """
import importlib.abc, sys
allowed = set(sys.argv[1].split(","))

class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        top = name.split(".")[0]
        if path is None and top not in allowed | set(sys.stdlib_module_names) and not top.startswith("_"):
            raise ModuleNotFoundError(f"not in the image: {name}", name=name)
        return None

sys.meta_path.insert(0, Block())
import flatshare.gateway.__main__, flatshare.gateway.server, flatshare.gateway.upstream_native
from flatshare.gateway.app import build_gateway
from flatshare.gateway.config import GatewayConfig
from flatshare.gateway.discovery import DiscoveryConfig
from flatshare.gateway.upstream import resolve_client
build_gateway(GatewayConfig(discover=(DiscoveryConfig("vllm"),)))
print(resolve_client("auto", ["http://10.0.0.1:8000"]))
print(",".join(sorted(m.split(".")[0] for m in sys.modules)))
"""


def instructions() -> list[tuple[str, str]]:
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    rows = [line.strip() for line in text.splitlines() if line.strip() and not line.strip().startswith("#")]
    return [(row.split(None, 1)[0].upper(), row.split(None, 1)[1]) for row in rows]


def pinned() -> dict[str, str]:
    rows = [line.split("#")[0].strip() for line in REQUIREMENTS.read_text().splitlines()]
    pins = dict(row.split("==") for row in rows if row)
    return {_norm(name): version for name, version in pins.items()}


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def test_dockerfile_is_pinned_small_and_non_root() -> None:
    steps = instructions()
    base = next(value for op, value in steps if op == "ARG" and value.startswith("PYTHON_IMAGE="))
    assert re.fullmatch(r"PYTHON_IMAGE=python:3\.11\.\d+-slim-[a-z]+", base), base  # an exact release
    assert [value for op, value in steps if op == "FROM"] == ["${PYTHON_IMAGE} AS build", "${PYTHON_IMAGE}"]
    user = next(value for op, value in steps if op == "USER")
    uid = int(user.split(":")[0])
    assert uid >= 1000
    gateway = (KUBERNETES / "gateway" / "deployment.yaml").read_text()
    assert f"runAsUser: {uid}" in gateway
    port = tomllib.loads((KUBERNETES / "gateway" / "gateway.toml").read_text())["port"]
    assert ("EXPOSE", str(port)) in steps
    assert ("ENTRYPOINT", '["python", "-m", "flatshare.gateway", "gateway"]') in steps
    runs = " ".join(value for op, value in steps if op == "RUN")
    assert "--no-deps" in runs and ".[" not in runs  # flatshare without any extra, the `cpu` one above all
    assert not set(pinned()) & set(NOT_IN_IMAGE)
    ignore = (REPO / ".dockerignore").read_text().split()
    assert ignore[ignore.index("*") + 1 :][:4] == [
        "!pyproject.toml",
        "!README.md",
        "!src/",
        "!deploy/docker/",
    ]


def image_distributions() -> set[str]:
    """The pinned requirements and, recursively, their dependencies without extras (what pip installs)."""
    allowed = set(pinned())
    frontier = list(allowed)
    while frontier:
        try:
            needs = requires(frontier.pop()) or []
        except PackageNotFoundError:
            continue
        for need in needs:
            if "extra ==" in need or 'python_version < "3.11"' in need or "python_version < '3.11'" in need:
                continue
            dep = _norm(re.split(r"[ ;<>=!~\[(]", need, maxsplit=1)[0])
            if dep not in allowed:
                allowed.add(dep)
                frontier.append(dep)
    return allowed


def test_the_gateway_runs_on_the_pinned_requirements_alone() -> None:
    """The gateway imports and builds (with DNS discovery, the native client) with every third-party
    module outside the image's requirements blocked: the list is enough, and nothing heavy is needed."""
    distributions = image_distributions()
    assert not distributions & set(NOT_IN_IMAGE), distributions & set(NOT_IN_IMAGE)
    modules = {
        module
        for module, dists in packages_distributions().items()
        if any(_norm(d) in distributions for d in dists)
    }
    done = subprocess.run(
        [sys.executable, "-c", BLOCKED_IMPORT, ",".join(sorted(modules | {"flatshare"}))],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    client, imported = done.stdout.split()
    assert client == "native"
    assert not set(imported.split(",")) & set(NOT_IN_IMAGE)
    for name, version in pinned().items():  # the pins are the releases the tests ran with
        assert installed_version(name) == version, name


def builder() -> list[str] | None:
    """A container builder that works here (a docker daemon that answers, podman or buildah)."""
    docker = shutil.which("docker")
    if docker and subprocess.run([docker, "info"], capture_output=True, timeout=30).returncode == 0:
        return ["docker", "build"]
    for tool in ("podman", "buildah"):
        if shutil.which(tool):
            return [tool, "build"] if tool == "podman" else [tool, "bud"]
    return None


@pytest.mark.load_sensitive
def test_image_builds(tmp_path: Path) -> None:
    """Needs a builder and the base image from a registry: `make test-server` runs it where both exist."""
    command = builder()
    if command is None:
        pytest.skip("no container builder here (no docker daemon, podman or buildah)")
    done = subprocess.run(
        [*command, "-t", "flatshare-gateway:test", str(REPO)], capture_output=True, timeout=1200
    )
    assert done.returncode == 0, done.stderr[-3000:]
