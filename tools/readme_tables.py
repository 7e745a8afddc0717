"""Rewrite the docs' generated co-location tables from docs/results/colocation/summary.json, with the
best make-room configuration from docs/results/mechanisms/llama3-8b-24gb/summary.json
(`flatshare.colocation.readme_tables`: the README's headline table, the results page's write-up and
per-caller tables).

    .venv/bin/python tools/readme_tables.py            (rewrite the pages)
    .venv/bin/python tools/readme_tables.py --check    (exit 1 if a page differs)
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from flatshare.colocation.readme_tables import PAGES, load_docs_summary, render

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--check", action="store_true", help="only say whether the pages are up to date")
    args = parser.parse_args()
    summary = load_docs_summary(ROOT)
    stale = []
    for page, names in PAGES.items():
        path = ROOT / page
        text = path.read_text()
        wanted = render(text, summary, names)
        if wanted == text:
            continue
        stale.append(page)
        if not args.check:
            path.write_text(wanted)
    if args.check and stale:
        sys.exit(
            f"generated tables differ from summary.json in {', '.join(stale)}: run tools/readme_tables.py"
        )


if __name__ == "__main__":
    main()
