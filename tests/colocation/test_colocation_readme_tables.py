"""The docs' generated co-location tables (the README's headline table, the results page's write-up table
and per-caller table) are what `readme_tables` generates from the committed summary.json; a number changed
by hand fails. summary.json reads back as written."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from flatshare.colocation.readme_tables import (
    BEST,
    BLOCKS,
    MECHANISMS_SUMMARY_PATH,
    PAGES,
    RESULTS_PAGE,
    SUMMARY_PATH,
    docs_summary,
    load_docs_summary,
    render,
    write_up_cell,
)
from flatshare.colocation.results import CallerResult, ColocationSummary
from flatshare.colocation.summary import load_summary

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def full_run() -> ColocationSummary:
    return load_docs_summary(ROOT)


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


def test_summary_json_reads_back_as_written_and_its_seed_rows_keep_their_figures() -> None:
    full_run = load_summary(ROOT / SUMMARY_PATH)
    written = json.loads((ROOT / SUMMARY_PATH).read_text())
    again = json.loads(json.dumps(full_run.to_json()))  # tuples as lists, as written
    blocks = [again, *again["by_callers"].values()]  # each holds `conditions`
    for m in (m for block in blocks for m in block["conditions"].values()):
        if m["step_ledger"] == {}:  # a run saved before the step ledger reads back with an empty one
            del m["step_ledger"]
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


def test_the_best_configuration_sits_beside_the_main_run_only_when_both_measured_the_same() -> None:
    main, mechanisms = load_summary(ROOT / SUMMARY_PATH), load_summary(ROOT / MECHANISMS_SUMMARY_PATH)
    merged = docs_summary(main, mechanisms)
    assert BEST not in main.first.conditions and BEST in merged.first.conditions
    assert merged.first.conditions["vllm-priority"] == main.first.conditions["vllm-priority"]
    other = dataclasses.replace(mechanisms, setup={**(mechanisms.setup or {}), "kv_tokens": 1})
    with pytest.raises(ValueError, match="setup"):
        docs_summary(main, other)
    stock = main.first.conditions["vllm-priority"]
    moved = dataclasses.replace(stock, voice_turn_p95_s=(stock.voice_turn_p95_s or 0) + 1)
    blocks = {**mechanisms.by_callers}
    blocks[2] = CallerResult(blocks[2].target_s, {**blocks[2].conditions, "vllm-priority": moved})
    with pytest.raises(ValueError, match="vllm-priority"):
        docs_summary(main, dataclasses.replace(mechanisms, by_callers=blocks))


def test_the_write_up_column_quotes_the_write_up() -> None:
    assert write_up_cell("make-room-t48") == "2.24 s, over target 32%, agents 0.97"
    assert write_up_cell(BEST) == "-"
