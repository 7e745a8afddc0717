"""The README's seed table and per-caller table are what `readme_tables` generates from the committed
summary.json; a number changed by hand fails. summary.json reads back as written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from flatshare.colocation.readme_tables import SUMMARY_PATH, render
from flatshare.colocation.results import ColocationSummary
from flatshare.colocation.summary import load_summary

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def full_run() -> ColocationSummary:
    return load_summary(ROOT / SUMMARY_PATH)


def test_the_readme_tables_are_generated_from_summary_json(full_run: ColocationSummary) -> None:
    text = (ROOT / "README.md").read_text()
    assert render(text, full_run) == text, (
        "README's tables drifted from summary.json: run tools/readme_tables.py"
    )


def test_a_number_changed_by_hand_is_caught(full_run: ColocationSummary) -> None:
    text = (ROOT / "README.md").read_text()
    for cell in ("| 10.4 | 9.88-11.6 |", "| 2.34 s [2.30-2.40] |"):
        assert text.count(cell) == 1
        drifted = text.replace(cell, cell.replace("4", "5", 1))
        assert render(drifted, full_run) == text


def test_render_wants_each_block_marked_once(full_run: ColocationSummary) -> None:
    text = (ROOT / "README.md").read_text()
    with pytest.raises(ValueError, match="seed-table"):
        render(text.replace("<!-- generated: seed-table -->", ""), full_run)


def test_summary_json_reads_back_as_written_and_its_seed_rows_keep_their_figures(
    full_run: ColocationSummary,
) -> None:
    written = json.loads((ROOT / SUMMARY_PATH).read_text())
    again = json.loads(json.dumps(full_run.to_json()))  # tuples as lists, as written
    assert {k: v for k, v in again.items() if k not in ("seed_comparison", "version")} == {
        k: v for k, v in written.items() if k not in ("seed_comparison", "version")
    }
    # The rows derived again carry the figures the run wrote; only labels and engine time are new.
    figures = ("row", "seed", "flatshare", "ratio", "ci")
    stored = [{k: row[k] for k in figures} for row in written["seed_comparison"]]
    derived = [{k: row[k] for k in figures} for row in again["seed_comparison"]]
    assert derived == stored
    # Judging turn rows on engine time changes no hit of the full run.
    assert [row["hit"] for row in again["seed_comparison"]] == [
        row["hit"] for row in written["seed_comparison"]
    ]
