"""Ask Linux for AMX tile permission in every vLLM process: a vLLM general plugin.

Linux (5.16 and later) lets a process execute AMX tile instructions only after it has asked the kernel
for the tile data state, `arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)`; without that request
the first tile instruction is an illegal instruction (SIGILL). The permission is per process: inherited
on fork, cleared on exec (the kernel's Documentation/arch/x86/xstate.rst).

vLLM 0.32's CPU attention picks its `amx` kernel for bfloat16 models with a block size a multiple of 32
whenever the CPU advertises AMX (`_get_attn_isa` in `vllm/v1/attention/backends/cpu_attn.py`), and never
makes that request itself (neither does 0.33). It can work only where something else in the process
asked first: without this plugin, a first prompt of 399 tokens ran and one of 3 tokens did not (what asks
on the longer path was not established). Where nothing did, the engine's worker dies on its first
forward pass with exit code -4. Seen on a 2-core virtual machine whose Intel Xeon advertises
`amx_tile` and `amx_bf16`, with the tiny test model; reproduced with vLLM's own `LLM` class and no
flatshare code loaded, and gone when the process called `torch.cpu._init_amx()` (PyTorch's own request,
made before its AMX kernels) first.

`request_amx_permission` is registered under vLLM's `vllm.general_plugins` entry point group, which vLLM
loads in the API server, the engine core and each worker before the model runs
(`vllm/plugins/__init__.py`). It does nothing on a CPU without AMX. To leave it out, name the plugins
to load in `VLLM_PLUGINS` without `flatshare-amx`.
"""

from __future__ import annotations

import logging

logger = logging.getLogger(__name__)


def request_amx_permission() -> bool:
    """Request AMX tile permission for this process if the CPU has AMX; True when it is granted.

    Safe to call any number of times and in any process (vLLM loads general plugins once a process).
    Returns False on a CPU without AMX tiles, and logs a warning when the CPU has them but the kernel
    refuses, since vLLM's `amx` attention kernel will then die with an illegal instruction.
    """
    import torch  # imported here: vLLM has imported it already, and the entry point stays cheap to load

    if not torch.cpu._is_amx_tile_supported():
        return False
    granted = bool(torch.cpu._init_amx())
    if not granted:
        logger.warning(
            "the CPU has AMX tiles but Linux refused the permission to use them; vLLM's CPU attention "
            "will pick its amx kernel for bfloat16 models and die with an illegal instruction "
            "(a float16 model does not use that kernel)."
        )
    return granted
