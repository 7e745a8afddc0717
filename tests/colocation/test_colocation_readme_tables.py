"""The docs' generated co-location tables (the README's headline table, the results page's write-up table
and per-caller table) are what `readme_tables` generates from the committed summary.json; a number changed
by hand fails. summary.json reads back as written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from flatshare.colocation.readme_tables import BLOCKS, PAGES, RESULTS_PAGE, SUMMARY_PATH, render
from flatshare.colocation.results import ColocationSummary
from flatshare.colocation.summary import load_summary

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def full_run() -> ColocationSummary:
    return load_summary(ROOT / SUMMARY_PATH)


@pytest.mark.parametrize("page", sorted(PAGES))
def test_the_docs_tables_are_generated_from_summary_json(full_run: ColocationSummary, page: str) -> None:
    text = (ROOT / page).read_text()
    assert render(text, full_run, PAGES[page]) == text, (
        f"{page}'s tables drifted from summary.json: run tools/readme_tables.py"
    )


def test_every_block_is_on_a_page() -> None:
    placed = [name for names in PAGES.values() for name in names]
    assert sorted(placed) == sorted(BLOCKS)


@pytest.mark.parametrize(
    ("page", "cell"),
    [
        (RESULTS_PAGE, "| 10.4 | 9.88-11.6 |"),
        (RESULTS_PAGE, "| 2.34 s [2.30-2.40] | 43.9% | 2.28 s"),
        ("README.md", "| 2.34 s [2.30-2.40] | 43.9% | 0.988 |"),
    ],
)
def test_a_number_changed_by_hand_is_caught(full_run: ColocationSummary, page: str, cell: str) -> None:
    text = (ROOT / page).read_text()
    assert text.count(cell) == 1
    drifted = text.replace(cell, cell.replace("4", "5", 1))
    assert render(drifted, full_run, PAGES[page]) == text


def test_render_wants_each_block_marked_once(full_run: ColocationSummary) -> None:
    text = (ROOT / RESULTS_PAGE).read_text()
    with pytest.raises(ValueError, match="seed-table"):
        render(text.replace("<!-- generated: seed-table -->", ""), full_run, PAGES[RESULTS_PAGE])
    readme = (ROOT / "README.md").read_text()
    with pytest.raises(ValueError, match="headline-table"):
        render(readme + readme, full_run, PAGES["README.md"])


def test_summary_json_reads_back_as_written_and_its_seed_rows_keep_their_figures(
    full_run: ColocationSummary,
) -> None:
    written = json.loads((ROOT / SUMMARY_PATH).read_text())
    again = json.loads(json.dumps(full_run.to_json()))  # tuples as lists, as written
    derived_keys = (
        "seed_comparison",
        "ablation",
        "version",
    )  # derived again on reading; an older file lacks ablation
    assert {k: v for k, v in again.items() if k not in derived_keys} == {
        k: v for k, v in written.items() if k not in derived_keys
    }
    assert {(row["callers"], row["condition"]) for row in again["ablation"]} >= {
        (n, "make-room-t48") for n in again["callers"]
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
