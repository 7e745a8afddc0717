"""What a running process uses, read from Linux's /proc: CPU seconds, time waiting for a CPU, memory.

The benchmarks measure the servers they start (the gateway, serve-sim, a fake vLLM) with these; a
process that has gone away raises OSError.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path


def cpu_seconds(pid: int, with_children: bool = False) -> float:
    """User + system CPU seconds of process `pid` so far; with `with_children`, of its live child
    processes too (`/proc/<pid>/task/<pid>/children`; a child that ends meanwhile is skipped)."""
    total = _cpu(pid)
    if with_children:
        with contextlib.suppress(OSError):
            for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split():
                with contextlib.suppress(OSError):
                    total += _cpu(int(child))
    return total


def _cpu(pid: int) -> float:
    # /proc/<pid>/stat: the command name may hold spaces and ")", so fields are counted after the last ")"
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run_queue_seconds(pid: int) -> float:
    """Seconds the threads of process `pid` have spent runnable but waiting for a CPU (the run queue),
    the second field of each `/proc/<pid>/task/<tid>/schedstat`: the time the machine did not run a
    process that had work to do (a thread that ends meanwhile is skipped)."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError, IndexError, ValueError):
            total += int((task / "schedstat").read_text().split()[1])
    return total / 1e9


def rss_kb(pid: int) -> int:
    """The resident set of process `pid` in kB (`VmRSS` of /proc/<pid>/status)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise OSError(f"no VmRSS for pid {pid} (a zombie?)")
