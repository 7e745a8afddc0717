"""The benchmarks' /proc readers: CPU seconds (a process's own, or with its children), time waiting for a CPU
and resident memory."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from flatshare.testing.procstat import cpu_seconds, rss_kb, run_queue_seconds


def test_cpu_seconds_grow_with_work_done() -> None:
    before = cpu_seconds(os.getpid())
    deadline = time.process_time() + 0.3
    while time.process_time() < deadline:
        pass
    assert cpu_seconds(os.getpid()) - before >= 0.2


def test_with_children_adds_a_busy_child() -> None:
    busy = "import time\nend = time.process_time() + 1.0\nwhile time.process_time() < end: pass\ninput()\n"
    child = subprocess.Popen([sys.executable, "-c", busy], stdin=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        while cpu_seconds(child.pid) < 0.8 and time.monotonic() < deadline:
            time.sleep(0.05)
        spent = cpu_seconds(child.pid)  # the child now waits on stdin: its CPU time stays put
        alone, together = cpu_seconds(os.getpid()), cpu_seconds(os.getpid(), with_children=True)
        assert spent >= 0.8
        assert together - alone == pytest.approx(spent, abs=0.05)  # clock ticks of 10 ms
    finally:
        child.communicate(b"\n", timeout=60)


def test_two_busy_processes_on_one_core_wait_for_it() -> None:
    """Two children each needing 0.5 s of CPU, pinned to one core: each waits while the other runs."""
    busy = "import time\nend = time.process_time() + 0.5\nwhile time.process_time() < end: pass\ninput()\n"
    core = min(os.sched_getaffinity(0))
    children = [
        subprocess.Popen(
            [sys.executable, "-c", busy],
            stdin=subprocess.PIPE,
            preexec_fn=lambda: os.sched_setaffinity(0, {core}),
        )
        for _ in range(2)
    ]
    try:
        deadline = time.monotonic() + 60
        while min(cpu_seconds(c.pid) for c in children) < 0.45 and time.monotonic() < deadline:
            time.sleep(0.05)
        waited = sum(run_queue_seconds(c.pid) for c in children)
        assert waited >= 0.4  # at least the other's 0.5 s of CPU, less clock granularity
    finally:
        for child in children:
            child.communicate(b"\n", timeout=60)


def test_rss_is_this_process_resident_set() -> None:
    ballast = bytearray(64 * 1024 * 1024)  # touched, so resident
    ballast[::4096] = b"x" * len(ballast[::4096])
    assert rss_kb(os.getpid()) > 64 * 1024
    del ballast


def test_a_process_that_is_gone_raises_oserror() -> None:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait(timeout=60)
    with pytest.raises(OSError):
        cpu_seconds(child.pid)
    with pytest.raises(OSError):
        run_queue_seconds(child.pid)
    with pytest.raises(OSError):
        rss_kb(child.pid)
