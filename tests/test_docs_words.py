"""The docs use one word per concept, and cite nothing a reader cannot open (issue 37's word rules).

- No internal issue numbers (`issue 13`): readers cannot open this project's tracker. vLLM's own issues
  (`vLLM issue #40004`) are public and stay.
- vLLM's admission rule has one name, the CLI's (`--admission-rule full-prompt|first-chunk`): not "whole-prompt".
- "seed" is only a random seed: the source documents are "the write-up" and "the proposal" (README), never
  "the first seed", "the seed's table" or "the seed preset".
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from kit.doc_blocks import doc_files

ROOT = Path(__file__).resolve().parents[1]
DOCS = doc_files(ROOT)
INTERNAL_ISSUE = re.compile(r"(?<!vLLM )\bissues? #?\d+", re.IGNORECASE)
SOURCE_AS_SEED = re.compile(r"\b(first|second) seed\b|\bthe seed('s)?\b|\bseed preset\b", re.IGNORECASE)
OTHER_RULE_NAMES = re.compile(r"whole-prompt (admission )?rule|first-chunk/full-prompt", re.IGNORECASE)


def _hits(pattern: re.Pattern[str], path: Path) -> list[str]:
    return [
        f"{path.relative_to(ROOT)}:{n}: {m.group(0)}"
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        for m in pattern.finditer(line)
    ]


@pytest.mark.parametrize("path", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_internal_issue_numbers(path: Path) -> None:
    assert _hits(INTERNAL_ISSUE, path) == []


@pytest.mark.parametrize("path", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_admission_rule_has_one_name(path: Path) -> None:
    assert _hits(OTHER_RULE_NAMES, path) == []


@pytest.mark.parametrize("path", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_seed_means_a_random_seed(path: Path) -> None:
    assert _hits(SOURCE_AS_SEED, path) == []


def test_patterns_catch_what_they_mean() -> None:
    text = "fixed in issue 13; Issue #15 asks; vLLM issue #40004 is public; the whole-prompt rule"
    assert [m.group(0) for m in INTERNAL_ISSUE.finditer(text)] == ["issue 13", "Issue #15"]
    assert [m.group(0) for m in OTHER_RULE_NAMES.finditer(text)] == ["whole-prompt rule"]
    text = "the first seed's table; The seed states; a seed preset; 5 seeds pooled; seed 0; --seed 3"
    assert [m.group(0) for m in SOURCE_AS_SEED.finditer(text)] == ["first seed", "The seed", "seed preset"]
