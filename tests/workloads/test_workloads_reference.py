"""docs/workloads.md is the spec parser's table, regenerated (flatshare.workloads.reference)."""

from __future__ import annotations

from pathlib import Path

from flatshare.workloads import kinds, reference

PAGE = Path(__file__).resolve().parents[2] / "docs" / "workloads.md"


def test_page_matches_the_parser() -> None:
    assert PAGE.read_text(encoding="utf-8") == reference.render(), (
        "docs/workloads.md drifted from flatshare.workloads.spec: run "
        "`python -m flatshare.workloads.reference > docs/workloads.md`"
    )


def test_page_changes_when_a_default_changes(monkeypatch) -> None:
    kind = kinds.KINDS["voice"]
    changed = type(kind)(kind.build, kind.keys, kind.defaults | {"callers": 7}, kind.takes_path)
    monkeypatch.setitem(kinds.KINDS, "voice", changed)
    assert "| `callers` | int | `7` |" in reference.render()
    assert reference.render() != PAGE.read_text(encoding="utf-8")


def test_every_kind_and_key_is_listed() -> None:
    page = reference.render()
    for name, kind in kinds.KINDS.items():
        assert f"## `{name}`" in page
        assert all(f"| `{key}` |" in page for key in kind.keys)
