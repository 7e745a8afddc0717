"""The fenced blocks of the project's Markdown docs, with the `doc-test` marker that says how each is tested.

A block is a fence (three backticks, optionally indented) with a language: `bash`/`sh`/`console`/`shell`
(commands), `toml`/`json`/`yaml` (config examples), `python` (snippets) or `text` (output, formulas,
diagrams: not tested). A command block must follow a marker, on the nearest non-blank line above the fence:

    <!-- doc-test: run -->          run by tests/test_docs_commands.py in `make test`
    <!-- doc-test: gpu -->          needs a GPU: checked, not run
    <!-- doc-test: cluster -->      needs Kubernetes, Docker or a Ray cluster: checked, not run
    <!-- doc-test: vllm-server -->  starts or needs a real vLLM server: checked, not run
    <!-- doc-test: long -->         runs for minutes: checked, not run
    <!-- doc-test: synopsis -->     a usage line (`[optional]`, `a|b`): checked with the first alternatives

Config and Python blocks need no marker: they are always loaded (docs/doc-tests.md). A Python block for
libraries flatshare does not install (LiveKit, Pipecat) is marked `<!-- doc-test: syntax -->`: it is
compiled, its imports are not resolved.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

COMMAND_LANGS = frozenset({"bash", "sh", "console", "shell"})
CONFIG_LANGS = frozenset({"toml", "json", "yaml"})
CODE_LANGS = frozenset({"python"})
UNTESTED_LANGS = frozenset({"text"})
RUN = "run"
CHECK_ONLY = frozenset({"gpu", "cluster", "vllm-server", "long", "synopsis"})
SYNTAX = "syntax"  # a Python block needing libraries flatshare does not install: compiled only
MARKERS = frozenset({RUN, SYNTAX}) | CHECK_ONLY
_FENCE = re.compile(r"^(\s*)```(\S*)\s*$")
_MARKER = re.compile(r"^\s*<!--\s*doc-test:\s*([a-z-]+)\s*-->\s*$")


@dataclass(frozen=True)
class Block:
    """One fenced block: where it starts (the fence's 1-based line), its language, marker and text."""

    path: Path
    line: int
    lang: str
    marker: str | None
    text: str

    @property
    def where(self) -> str:
        return f"{self.path}:{self.line}"


def read_blocks(path: Path) -> list[Block]:
    """Every fenced block of `path`, in order. A fence left open is a `ValueError`."""
    lines = Path(path).read_text(encoding="utf-8").splitlines()
    blocks: list[Block] = []
    i = 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if m is None:
            i += 1
            continue
        indent, lang = m.group(1), m.group(2)
        end = next((j for j in range(i + 1, len(lines)) if lines[j].strip() == "```"), None)
        if end is None:
            raise ValueError(f"{path}:{i + 1}: a fence that is never closed")
        body = [line[len(indent) :] if line.startswith(indent) else line for line in lines[i + 1 : end]]
        blocks.append(Block(Path(path), i + 1, lang, _marker_above(lines, i), "\n".join(body) + "\n"))
        i = end + 1
    return blocks


def _marker_above(lines: list[str], fence: int) -> str | None:
    above = next((lines[j] for j in range(fence - 1, -1, -1) if lines[j].strip()), "")
    m = _MARKER.match(above)
    return m.group(1) if m else None


def problems_of_form(block: Block) -> list[str]:
    """What is wrong with the block's language or marker (empty when it is well formed)."""
    known = COMMAND_LANGS | CONFIG_LANGS | CODE_LANGS | UNTESTED_LANGS
    if block.lang not in known:
        return [f"{block.where}: fence language {block.lang!r}: use one of {', '.join(sorted(known))}"]
    if block.marker is not None and block.marker not in MARKERS:
        return [
            f"{block.where}: unknown doc-test marker {block.marker!r}; valid: {', '.join(sorted(MARKERS))}"
        ]
    if block.marker == SYNTAX and block.lang not in CODE_LANGS:
        return [f"{block.where}: the `{SYNTAX}` marker is for Python blocks only"]
    if block.lang in COMMAND_LANGS and block.marker is None:
        return [
            f"{block.where}: a command block without a doc-test marker: put `<!-- doc-test: KIND -->` above "
            f"it ({', '.join(sorted(MARKERS))}; docs/doc-tests.md)"
        ]
    return []


def doc_files(root: Path) -> list[Path]:
    """The hand-written docs, whose blocks and words are tested: README.md, docs/*.md, and the results' own
    pages (docs/results/CHANGELOG.md, docs/results/*/README.md; the reports and tables beside them are
    written by the experiments)."""
    results = root / "docs" / "results"
    pages = sorted(results.glob("*/README.md"))
    if (results / "CHANGELOG.md").exists():
        pages.insert(0, results / "CHANGELOG.md")
    return [root / "README.md", *sorted((root / "docs").glob("*.md")), *pages]
