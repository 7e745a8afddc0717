"""make-room's trace reference (docs/make-room-trace.md) stays true to the code that writes the trace."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from flatshare.scheduler import make_room, mechanisms, trace
from flatshare.scheduler.trace_reference import FIELDS, markdown

pytestmark = pytest.mark.vllm  # importing the scheduler package imports vLLM

ROOT = Path(__file__).resolve().parents[2]


def written_keys(source: str) -> set[str]:
    """The keys a module writes into a dict named `trace` or `self._pending_trace` (merged into the step's
    line): `trace["k"] = ...`, `trace.update(k=...)`, `.setdefault("k", ...)`, or a literal `{"k": ...}`
    merged into a trace line (`{"step": step, **record}`)."""

    def is_trace(node: ast.expr) -> bool:
        return (isinstance(node, ast.Name) and node.id == "trace") or (
            isinstance(node, ast.Attribute) and node.attr == "_pending_trace"
        )

    keys: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Store):
            if (
                is_trace(node.value)
                and isinstance(node.slice, ast.Constant)
                and isinstance(node.slice.value, str)
            ):
                keys.add(node.slice.value)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            target = node.func.value
            if node.func.attr == "update" and is_trace(target):
                keys.update(k.arg for k in node.keywords if k.arg is not None)
            first = node.args[0] if node.args else None
            if node.func.attr == "setdefault" and is_trace(target) and isinstance(first, ast.Constant):
                keys.add(str(first.value))
        elif isinstance(node, ast.Dict) and any(k is None for k in node.keys):  # {"step": ..., **record}
            keys.update(
                k.value for k in node.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)
            )
    return keys


def test_every_written_key_is_documented_and_every_documented_key_written() -> None:
    written = set().union(
        *(written_keys(Path(module.__file__).read_text()) for module in (make_room, mechanisms, trace))
    )
    assert written == set(FIELDS), (
        f"undocumented: {sorted(written - set(FIELDS))}; never written: {sorted(set(FIELDS) - written)}"
    )


def test_the_page_is_generated() -> None:
    page = (ROOT / "docs" / "make-room-trace.md").read_text(encoding="utf-8")
    assert page == markdown(), "run: python -m flatshare.scheduler.trace_reference > docs/make-room-trace.md"


def test_the_key_reader_finds_each_form() -> None:
    source = 'trace["a"] = 1\ntrace.update(b=2, c=3)\nother["x"] = 0\nline = {"d": 1, **record}\n'
    assert written_keys(source) == {"a", "b", "c", "d"}
