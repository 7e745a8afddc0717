"""Every fenced block of README.md and docs/*.md is run or checked (docs/doc-tests.md).

`run` blocks run here with bash in a temporary folder: `flatshare` and `python` are this interpreter's, each
port the block names is swapped for a free loopback port, a line started with `&` is waited for until its
port accepts connections, and `curl` fails on an HTTP error (`--fail-with-body`). The block's processes are
stopped (their process group) when it ends. Every other command block is checked by
`flatshare.testing.doc_check`; config and Python blocks are loaded.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from flatshare.testing.doc_blocks import RUN, Block, doc_files, problems_of_form, read_blocks
from flatshare.testing.doc_check import check_block

ROOT = Path(__file__).resolve().parents[1]
BLOCKS = [b for f in doc_files(ROOT) for b in read_blocks(f)]
TESTED = [b for b in BLOCKS if b.lang != "text"]
RUN_TIMEOUT_S = 120
_PORT = re.compile(r"(--port |127\.0\.0\.1:|localhost:)(\d{4,5})\b")


def _ids(blocks: list[Block]) -> list[str]:
    return [f"{b.path.relative_to(ROOT)}:{b.line}" for b in blocks]


@pytest.mark.parametrize("block", BLOCKS, ids=_ids(BLOCKS))
def test_block_is_well_formed(block: Block) -> None:
    assert problems_of_form(block) == []


@pytest.mark.parametrize("block", TESTED, ids=_ids(TESTED))
def test_block_passes_its_checks(block: Block) -> None:
    assert check_block(block, ROOT) == []


RUNS = [b for b in BLOCKS if b.marker == RUN]


@pytest.mark.parametrize("block", RUNS, ids=_ids(RUNS))
def test_run_block_runs(block: Block, tmp_path: Path) -> None:
    result = run_block(block.text, tmp_path)
    assert result.returncode == 0, f"{block.where} failed:\n{result.stdout[-4000:]}"


def run_block(text: str, folder: Path) -> subprocess.CompletedProcess[str]:
    """Run a shell block as the module docstring says; its output (stdout and stderr) in `stdout`."""
    bin_dir = folder / ".doc-bin"
    bin_dir.mkdir()
    src = ROOT / "src"
    (bin_dir / "flatshare").write_text(
        f'#!/bin/sh\nPYTHONPATH="{src}" exec "{sys.executable}" -m flatshare.cli "$@"\n'
    )
    (bin_dir / "python").write_text(f'#!/bin/sh\nPYTHONPATH="{src}" exec "{sys.executable}" "$@"\n')
    for shim in bin_dir.iterdir():
        shim.chmod(0o755)
    env = os.environ | {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    log = folder / ".doc-run.log"
    with log.open("w") as out:
        proc = subprocess.Popen(
            ["bash", "-euo", "pipefail", "-c", prepare(text)],
            cwd=folder,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        try:
            code = proc.wait(timeout=RUN_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            code = 124
        finally:
            _stop_group(proc)
    return subprocess.CompletedProcess(proc.args, code, log.read_text(), "")


def prepare(text: str) -> str:
    """The block with free ports, waits after background lines and failing curls (module docstring)."""
    ports: dict[str, str] = {}

    def swap(m: re.Match[str]) -> str:
        return m.group(1) + ports.setdefault(m.group(2), str(_free_port()))

    text = _PORT.sub(swap, text.replace("\\\n", " "))
    lines = []
    for line in text.splitlines():
        line = re.sub(r"^curl ", "curl --fail-with-body ", line)
        lines.append(line)
        m = re.search(r"--port (\d+).*&\s*(#.*)?$", line)
        if m:
            lines.append(
                f"for _ in $(seq 600); do (echo > /dev/tcp/127.0.0.1/{m.group(1)}) 2>/dev/null && break;"
                " sleep 0.1; done"
            )
    return "\n".join(lines) + "\n"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _stop_group(proc: subprocess.Popen[str]) -> None:
    """Stop the block's process group (its background servers), which this test started."""
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


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
