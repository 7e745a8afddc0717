"""Every fenced block of the hand-written docs (README.md, docs/*.md, the results' own pages) is run or
checked (docs/doc-tests.md).

`run` blocks run here in a temporary folder by `tests/kit/doc_run.py` (free ports, waits after
background servers, failing curls). Every other command block is checked by `tests/kit/doc_check.py`;
config and Python blocks are loaded.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from kit.doc_blocks import RUN, Block, doc_files, problems_of_form, read_blocks
from kit.doc_check import check_block
from kit.doc_run import run_block as run_doc_block

ROOT = Path(__file__).resolve().parents[1]
BLOCKS = [b for f in doc_files(ROOT) for b in read_blocks(f)]
TESTED = [b for b in BLOCKS if b.lang != "text"]
RUN_TIMEOUT_S = 120


def _ids(blocks: list[Block]) -> list[str]:
    return [f"{b.path.relative_to(ROOT)}:{b.line}" for b in blocks]


@pytest.mark.parametrize("block", BLOCKS, ids=_ids(BLOCKS))
def test_block_is_well_formed(block: Block) -> None:
    assert problems_of_form(block) == []


@pytest.mark.parametrize("block", TESTED, ids=_ids(TESTED))
def test_block_passes_its_checks(block: Block) -> None:
    assert check_block(block, ROOT) == []


RUNS = [b for b in BLOCKS if b.marker == RUN]


def run_block(text: str, folder: Path) -> subprocess.CompletedProcess[str]:
    return run_doc_block(text, folder, ROOT / "src", RUN_TIMEOUT_S)


@pytest.mark.parametrize("block", RUNS, ids=_ids(RUNS))
def test_run_block_runs(block: Block, tmp_path: Path) -> None:
    result = run_block(block.text, tmp_path)
    assert result.returncode == 0, f"{block.where} failed:\n{result.stdout[-4000:]}"


BROKEN = """# a doc

<!-- doc-test: long -->
```bash
flatshare replay --workload voice:callers=2 --no-such-option --out out/x
vllm serve MODEL --port 8000
python -m vllm.entrypoints.openai.api_server --model MODEL --not-a-vllm-flag
flatshare replay --workload voice:colours=3 --sim --out out/y
```

```bash
flatshare report out/x
```

```toml
port = 8080
backends = [{url = "http://127.0.0.1:8001"}]
admin_token = "short"
```
"""


def test_checker_fails_a_broken_doc(tmp_path: Path) -> None:
    """A doc command that breaks fails the suite: each of the broken blocks above is caught."""
    doc = tmp_path / "broken.md"
    doc.write_text(BROKEN)
    blocks = read_blocks(doc)
    problems = [p for b in blocks for p in problems_of_form(b) + check_block(b, ROOT)]
    text = "\n".join(problems)
    assert "No such option: --no-such-option" in text
    assert "`vllm ...`" in text
    assert "unrecognized arguments: --not-a-vllm-flag" in text
    assert "unknown setting 'colours=3'" in text
    assert "without a doc-test marker" in text
    assert "admin_token" in text
    assert len(problems) >= 6, text


def test_runner_fails_a_failing_block(tmp_path: Path) -> None:
    result = run_block("flatshare gateway --port 8080 --policy no-such-policy\n", tmp_path)
    assert result.returncode != 0
    assert "give at least one backend" in result.stdout


@pytest.mark.parametrize("path", sorted((ROOT / "examples").glob("*.toml")), ids=lambda p: p.name)
def test_example_config_loads(path: Path) -> None:
    """The shipped example configs are read by the gateway's own loader (docs/traffic-classes.md)."""
    from flatshare.gateway.configfile import load_config

    config = load_config(path)
    assert dict(config.classes) == {"voice": 0, "agent": 10}


def test_syntax_marked_python_is_compiled_only(tmp_path: Path) -> None:
    doc = tmp_path / "snippets.md"
    doc.write_text(
        "<!-- doc-test: syntax -->\n```python\nimport no_such_library_here\n```\n\n"
        "<!-- doc-test: syntax -->\n```python\ndef broken(:\n```\n\n"
        "```python\nimport no_such_library_here\n```\n"
    )
    found = [check_block(b, ROOT) for b in read_blocks(doc)]
    assert found[0] == []
    assert "not valid Python" in found[1][0]
    assert "no_such_library_here" in found[2][0]


def test_gateway_config_named_by_a_doc_is_loaded(tmp_path: Path) -> None:
    from kit.doc_check import check_command

    assert check_command(["flatshare", "gateway", "--config", "examples/gateway.toml"], ROOT) == []
    missing = check_command(["flatshare", "gateway", "--config", "examples/no-such.toml"], ROOT)
    assert missing == ["examples/no-such.toml: no such path in the repository"]


def test_timeout_checks_the_command_it_bounds() -> None:
    from kit.doc_check import check_command

    wait = "until curl -sf --max-time 5 localhost:8000/health; do sleep 1; done"
    assert check_command(["timeout", "300", "bash", "-c", wait], ROOT) == []
    replay = ["flatshare", "replay", "--workload", "voice:callers=1", "--sim", "--out", "out/x"]
    assert check_command(["timeout", "2m", *replay], ROOT) == []
    assert "no check known" in check_command(["timeout", "300", "bash", "-c", "nosuchtool x"], ROOT)[0]
    assert "No such option" in check_command(["timeout", "9", "flatshare", "replay", "--nope"], ROOT)[0]
    assert "DURATION" in check_command(["timeout", "soon", "sleep", "1"], ROOT)[0]
