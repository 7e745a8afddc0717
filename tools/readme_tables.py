"""Rewrite the README's generated co-location tables from docs/results/colocation/summary.json
(`flatshare.colocation.readme_tables`).

    .venv/bin/python tools/readme_tables.py            (rewrite README.md)
    .venv/bin/python tools/readme_tables.py --check    (exit 1 if README.md differs)
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from flatshare.colocation.readme_tables import SUMMARY_PATH, render
from flatshare.colocation.summary import load_summary

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--check", action="store_true", help="only say whether README.md is up to date")
    args = parser.parse_args()
    readme = ROOT / "README.md"
    text = readme.read_text()
    wanted = render(text, load_summary(ROOT / SUMMARY_PATH))
    if args.check:
        if wanted != text:
            sys.exit("README.md's generated tables differ from summary.json: run tools/readme_tables.py")
        return
    readme.write_text(wanted)


if __name__ == "__main__":
    main()
