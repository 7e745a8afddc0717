"""Running the docs' shell blocks as written (docs/doc-tests.md): `run_block`.

A block runs with bash (`-euo pipefail`) in a given folder, which holds a link to the checkout's `examples/`
(the docs name its files as from the checkout's root): `flatshare` and `python` are this interpreter's
(with this checkout's `src` first on the path), each port the block names is swapped for a free loopback
port, a line that starts a server with `--port N ... &` is followed by a wait until port N accepts
connections (at most a minute), and `curl` fails on an HTTP error (`--fail-with-body`). The block's
processes are stopped (their process group) when it ends or runs out of time.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
from pathlib import Path

_PORT = re.compile(r"(--port |127\.0\.0\.1:|localhost:)(\d{4,5})\b")
PORT_WAIT_S = 60


def run_block(text: str, folder: Path, src: Path, timeout_s: float) -> subprocess.CompletedProcess[str]:
    """Run a shell block as the module docstring says; its output (stdout and stderr) in `stdout`, exit
    code 124 when it ran out of time."""
    bin_dir = folder / ".doc-bin"
    bin_dir.mkdir(exist_ok=True)
    examples = src.parent / "examples"
    if examples.is_dir() and not (folder / "examples").exists():
        (folder / "examples").symlink_to(examples)
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
            code = proc.wait(timeout=timeout_s)
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
                f"for _ in $(seq {PORT_WAIT_S * 10}); do (echo > /dev/tcp/127.0.0.1/{m.group(1)}) 2>/dev/null"
                " && break; sleep 0.1; done"
            )
    return "\n".join(lines) + "\n"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _stop_group(proc: subprocess.Popen[str]) -> None:
    """Stop the block's process group (its background servers), which `run_block` started."""
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
