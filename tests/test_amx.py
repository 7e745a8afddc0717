"""The AMX permission plugin: registered where vLLM looks, and granting the permission in a fresh process."""

from __future__ import annotations

import json
import logging
import platform
import subprocess
import sys
from importlib.metadata import entry_points

import pytest

from flatshare.amx import request_amx_permission

XFEATURE_XTILEDATA = 18  # the tile data state component (Linux arch/x86/include/asm/fpu/types.h)

# A fresh interpreter: permission is per process and cleared on exec, so the test's own process (which may
# have asked already) says nothing. It reads the permitted state mask before and after the plugin runs,
# with arch_prctl(ARCH_GET_XCOMP_PERM = 0x1022) through libc's syscall (SYS_arch_prctl = 158 on x86-64).
# A kernel before 5.16 has no such call (EINVAL): the mask is then None, which only a CPU without AMX
# may report.
PROBE = """
import ctypes, errno, json
import torch
from flatshare.amx import request_amx_permission
libc = ctypes.CDLL(None, use_errno=True)
def permitted():
    mask = ctypes.c_uint64(0)
    if libc.syscall(158, 0x1022, ctypes.byref(mask)) == 0:
        return mask.value
    if ctypes.get_errno() == errno.EINVAL:
        return None
    raise OSError(ctypes.get_errno(), "arch_prctl(ARCH_GET_XCOMP_PERM)")
before = permitted()
returned = request_amx_permission()
again = request_amx_permission()
print(json.dumps({"amx_tile": torch.cpu._is_amx_tile_supported(), "before": before,
                  "returned": returned, "again": again, "after": permitted()}))
"""


def test_vllm_finds_the_plugin_in_its_general_plugins_group() -> None:
    found = {ep.name: ep for ep in entry_points(group="vllm.general_plugins")}
    assert "flatshare-amx" in found, "reinstall the package (make venv) to register its entry points"
    assert found["flatshare-amx"].load() is request_amx_permission


@pytest.mark.skipif(
    sys.platform != "linux" or platform.machine() != "x86_64", reason="AMX and arch_prctl: Linux on x86-64"
)
def test_a_fresh_process_is_granted_tile_data_exactly_when_the_cpu_has_amx() -> None:
    run = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    probe = json.loads(run.stdout.strip().splitlines()[-1])
    tile_bit = 1 << XFEATURE_XTILEDATA
    if probe["amx_tile"]:
        assert probe["before"] is not None and probe["after"] is not None
        assert not probe["before"] & tile_bit, "permitted before the plugin ran: the probe shows nothing"
        assert probe["returned"] is True and probe["again"] is True
        assert probe["after"] & tile_bit
    else:
        assert probe["returned"] is False and probe["again"] is False
        assert not (probe["after"] or 0) & tile_bit


def test_a_refusal_on_an_amx_cpu_returns_false_and_warns(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The kernel refusing cannot be produced here for real: torch's two calls stand in for it."""
    import torch

    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: True)
    monkeypatch.setattr(torch.cpu, "_init_amx", lambda: False)
    with caplog.at_level(logging.WARNING, logger="flatshare.amx"):
        assert request_amx_permission() is False
    assert "refused" in caplog.text and "illegal instruction" in caplog.text


def test_a_cpu_without_amx_is_not_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    asked: list[bool] = []
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: False)
    monkeypatch.setattr(torch.cpu, "_init_amx", lambda: asked.append(True) or True)
    assert request_amx_permission() is False
    assert asked == []
