"""docs/layout.md stays true: its package map is what `tools/docs_layout.py` generates from the source tree
(every package and module, each with its docstring's first sentence), and its hand-written diagram names
only packages and files that exist."""

from __future__ import annotations

import re
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "src" / "flatshare"
PAGE = ROOT / "docs" / "layout.md"


def _tree(root: Path, files: dict[str, str]) -> Path:
    for name, doc in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f'"""{doc}"""\n' if doc else "x = 1\n")
    return root


def test_the_page_is_generated_from_the_tree(docs_layout: ModuleType) -> None:
    text = PAGE.read_text(encoding="utf-8")
    assert docs_layout.rewrite(text, PACKAGE) == text, (
        "docs/layout.md differs from src/flatshare: run tools/docs_layout.py"
    )


def test_every_package_and_module_has_its_place(docs_layout: ModuleType) -> None:
    text = PAGE.read_text(encoding="utf-8")
    for init in PACKAGE.rglob("__init__.py"):
        package = init.parent
        if package != PACKAGE:
            assert f"### `{package.relative_to(PACKAGE).as_posix()}/`" in text, package
        section = text.split(
            "### top level" if package == PACKAGE else f"### `{package.relative_to(PACKAGE).as_posix()}/`", 1
        )[1].split("\n### ", 1)[0]
        for module in package.glob("*.py"):
            if module.name != "__init__.py":
                assert f"| `{module.stem}` | " in section, module


def test_the_map_follows_a_change_in_the_tree(docs_layout: ModuleType, tmp_path: Path) -> None:
    root = _tree(
        tmp_path / "pkg",
        {
            "__init__.py": "The package.",
            "alpha.py": "Alpha things. More about them.\n\nDetail.",
            "sub/__init__.py": "A subpackage: with | a bar.",
            "sub/beta.py": "Beta.",
        },
    )
    page = f"# Layout\n\ndiagram\n\n{docs_layout.BEGIN}stale{docs_layout.END}\n"
    first = docs_layout.rewrite(page, root)
    assert first.startswith("# Layout\n\ndiagram\n\n") and "stale" not in first
    assert "| `alpha` | Alpha things. |" in first
    assert "| `sub/` | A subpackage: with \\| a bar. |" in first
    assert "### `sub/`" in first and "| `beta` | Beta. |" in first
    (root / "sub").rename(root / "renamed")
    (root / "gamma.py").write_text('"""Gamma."""\n')
    second = docs_layout.rewrite(first, root)
    assert "`sub/`" not in second and "### `renamed/`" in second and "| `gamma` | Gamma. |" in second


def test_a_module_without_a_docstring_is_named(docs_layout: ModuleType, tmp_path: Path) -> None:
    root = _tree(tmp_path / "pkg", {"__init__.py": "The package.", "bare.py": ""})
    with pytest.raises(docs_layout.LayoutError, match=r"bare\.py: no module docstring"):
        docs_layout.render_layout(root)


def test_a_page_without_its_markers_is_refused(docs_layout: ModuleType, tmp_path: Path) -> None:
    root = _tree(tmp_path / "pkg", {"__init__.py": "The package."})
    with pytest.raises(docs_layout.LayoutError, match="generated: layout"):
        docs_layout.rewrite("# Layout\n", root)


def test_the_diagram_names_the_main_path_and_only_what_exists() -> None:
    diagram = PAGE.read_text(encoding="utf-8").split("```text", 1)[1].split("```", 1)[0]
    for package in ("workloads/", "replay/", "sim/", "scheduler/", "lab/", "colocation/", "admission/"):
        assert package in diagram, package
    for package in re.findall(r"\b(\w+)/(?![\w.])", diagram):
        assert (PACKAGE / package / "__init__.py").exists(), f"the diagram names {package}/"
    for path in re.findall(r"\b(\w+/\w+\.py)\b", diagram):
        assert (PACKAGE / path).exists(), f"the diagram names {path}"
    for doc in re.findall(r"\bdocs/[\w./-]+\.md\b", diagram):
        assert (ROOT / doc).exists(), f"the diagram names {doc}"
