"""The policy package stays pure: it imports nothing of flatshare but itself and `flatshare.errors`, and
no HTTP, asyncio or vLLM code, so the gateway and the virtual-time driver can both call it."""

from __future__ import annotations

import ast
from pathlib import Path

import flatshare.policy

POLICY = Path(flatshare.policy.__file__).parent
ALLOWED_FLATSHARE = ("flatshare.policy", "flatshare.errors")
FORBIDDEN = ("asyncio", "httpx", "starlette", "uvicorn", "vllm", "prometheus_client", "torch")


def imported_modules(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def test_policy_imports_only_itself_errors_and_no_io_libraries() -> None:
    files = sorted(POLICY.rglob("*.py"))
    assert len(files) >= 10
    wrong = {
        f"{path.relative_to(POLICY)}: {name}"
        for path in files
        for name in imported_modules(path)
        if (name.startswith("flatshare") and not name.startswith(ALLOWED_FLATSHARE))
        or name.split(".")[0] in FORBIDDEN
    }
    assert not wrong, sorted(wrong)
