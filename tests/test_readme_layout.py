"""The README's layout section stays true: every subpackage is in it, and every module it names exists."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src" / "flatshare"


def _layout() -> str:
    text = (ROOT / "README.md").read_text()
    start = text.index("## Layout")
    end = text.find("\n## ", start + 1)
    return text[start : end if end >= 0 else len(text)]


def _rows() -> dict[str, str]:
    """`package/` -> the names in backticks on its table row."""
    rows = {}
    for line in _layout().splitlines():
        match = re.match(r"\| `(\w+)/` \| (.*) \|$", line)
        if match:
            rows[match.group(1)] = match.group(2)
    return rows


def test_every_subpackage_has_a_row() -> None:
    packages = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").exists()}
    assert packages == set(_rows()), "README layout rows differ from src/flatshare's subpackages"


def test_every_module_a_row_names_exists() -> None:
    missing = []
    for package, row in _rows().items():
        for name in re.findall(r"`(\w+)\*?`", row):
            if name == "command" and package == "cli":
                continue  # "each package's `command` functions"
            folder = PACKAGE / package
            if not any(folder.glob(f"{name}*.py")) and not (folder / name).is_dir():
                missing.append(f"{package}/{name}")
    assert not missing, f"README layout names modules that do not exist: {missing}"


def test_the_diagram_names_the_main_path() -> None:
    diagram = _layout().split("```text", 1)[1].split("```", 1)[0]
    for package in ("workloads/", "replay/", "sim/", "scheduler/", "lab/", "colocation/", "admission/"):
        assert package in diagram, package
