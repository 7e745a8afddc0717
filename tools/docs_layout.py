"""docs/layout.md's package map, generated from the source tree: each package of `src/flatshare` with the
first sentence of its docstring, and each module with the first sentence of its own.

    .venv/bin/python tools/docs_layout.py            (rewrite docs/layout.md's generated part)
    .venv/bin/python tools/docs_layout.py --check    (exit 1 if it differs from the tree)

The page's text outside the `<!-- generated: layout -->` ... `<!-- end generated: layout -->` markers (the
main path's diagram) is hand-written and kept. Every module needs a docstring: one without is an error
naming it.
"""

from __future__ import annotations

import argparse
import ast
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src" / "flatshare"
PAGE = ROOT / "docs" / "layout.md"
BEGIN = "<!-- generated: layout -->\n"
END = "\n<!-- end generated: layout -->"
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z`(])")


class LayoutError(Exception):
    """The tree cannot be described: a module without a docstring, or a page without its markers."""


def first_sentence(path: Path) -> str:
    """The first sentence of a module's docstring, on one line; LayoutError when it has none."""
    doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8")))
    if not doc or not doc.strip():
        raise LayoutError(f"{path}: no module docstring (docs/layout.md shows each module's first sentence)")
    paragraph = " ".join(doc.strip().split("\n\n", 1)[0].split())
    return _SENTENCE_END.split(paragraph, 1)[0].replace("|", "\\|")


def packages(root: Path) -> list[Path]:
    """`root` and every package under it (folders with `__init__.py`), in path order."""
    found = [root, *(p.parent for p in root.rglob("__init__.py") if p.parent != root)]
    return sorted(found, key=lambda p: p.relative_to(root).parts)


def render_layout(root: Path) -> str:
    """The generated part of docs/layout.md for the package at `root`."""
    lines: list[str] = []
    for package in packages(root):
        rel = package.relative_to(root)
        name = "top level (`flatshare/`)" if rel == Path() else f"`{rel.as_posix()}/`"
        lines += [f"### {name}", "", first_sentence(package / "__init__.py"), ""]
        rows = []
        for child in sorted(package.iterdir()):
            if child.suffix == ".py" and child.name != "__init__.py":
                rows.append(f"| `{child.stem}` | {first_sentence(child)} |")
            elif (child / "__init__.py").exists():
                rows.append(f"| `{child.name}/` | {first_sentence(child / '__init__.py')} |")
        if rows:
            lines += ["| module | what it holds |", "|---|---|", *rows, ""]
    return "\n".join(lines).rstrip("\n")


def rewrite(page_text: str, root: Path) -> str:
    """`page_text` with its generated block rewritten from the tree at `root`."""
    start, end = page_text.find(BEGIN), page_text.find(END)
    if start < 0 or end < start or page_text.count(BEGIN) != 1:
        raise LayoutError(
            "docs/layout.md: want one `<!-- generated: layout -->` ... `<!-- end ... -->` block"
        )
    return page_text[: start + len(BEGIN)] + render_layout(root) + page_text[end:]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--check", action="store_true", help="only say whether docs/layout.md is current")
    args = parser.parse_args()
    text = PAGE.read_text(encoding="utf-8")
    try:
        wanted = rewrite(text, PACKAGE)
    except LayoutError as error:
        sys.exit(str(error))
    if args.check:
        if wanted != text:
            sys.exit("docs/layout.md differs from the source tree: run tools/docs_layout.py")
        return
    PAGE.write_text(wanted, encoding="utf-8")


if __name__ == "__main__":
    main()
