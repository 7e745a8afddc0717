"""The tiny model built once per session, and one real vLLM CPU server shared by the tests that can share it.

`tests/conftest.py` turns these into fixtures:
- `tiny_models` (session): `TinyModels`, one build per distinct shape (`make_tiny_model` with the same
  parameters reuses a finished build, so a shape is built at most once a session, ~15 s each);
- `tiny_model` (session): the default shape (vocab 512, 4096 positions);
- `tiny_vllm` (session): the shared server, `SHARED_SETTINGS` on the default tiny model. It starts on first
  use and stops right after the last test that uses it: conftest runs the modules that use it one after
  another, so the server (three processes, ~1.5 GB, ~30 s to start) lives for that stretch of the run
  and not beside every other test. Stopped by its process group (its pid), never by name.

A test that needs other settings (another scheduler class, an API key, a different KV size that its
assertions depend on) starts its own `VllmServer`, as before.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from typing import Any

import pytest

from flatshare.testing.tiny_model import make_tiny_model
from flatshare.testing.vllm_server import VllmServer, VllmServerConfig, VllmServerError

SHARED_FIXTURE = "tiny_vllm"
# What every sharing test lives with (each one's assertions checked against these):
# - tests/testing/test_vllm_server.py: a priority server, block size 32, max_model_len 1024 (any KV size);
# - tests/gateway/test_gateway_vllm.py: max_model_len 1024 (a 2000-token prompt is vLLM's own 400), the
#   priority field; its load-sensitive test needs the KV pushed past 0.3 by four ~1000-token fillers
#   (4 x ~1000 of 4064 tokens with 128 blocks; it had 64 blocks, where two fit at once);
# - tests/replay/test_replay_vllm_server.py: 128 blocks, max_model_len 1024 (its workload's records).
SHARED_SETTINGS: dict[str, Any] = {
    "max_model_len": 1024,
    "num_gpu_blocks": 128,
    "scheduling_policy": "priority",
    "max_num_seqs": 8,
}


def vllm_installed() -> bool:
    """Whether vLLM can be started, without importing it here (~9 s)."""
    return importlib.util.find_spec("vllm") is not None


class TinyModels:
    """Tiny models under one folder, one subfolder per shape, each built at most once."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def get(self, *, vocab_size: int = 512, max_position_embeddings: int = 4096) -> Path:
        folder = self.root / f"vocab{vocab_size}-pos{max_position_embeddings}"
        return make_tiny_model(folder, vocab_size=vocab_size, max_position_embeddings=max_position_embeddings)


class SharedServer:
    """The shared server: started on first `get()`, stopped by `stop()` (idempotent; a later `get()`
    starts a fresh one, so a test ordered after the stop still gets a running server)."""

    def __init__(self, models: TinyModels, log_dir: Path) -> None:
        self._models = models
        self._log_dir = log_dir
        self._server: VllmServer | None = None
        self.starts = 0

    def get(self) -> VllmServer:
        if self._server is None or not self._server.running():
            if not vllm_installed():
                pytest.skip("vLLM is not installed")
            config = VllmServerConfig(model=self._models.get(), **SHARED_SETTINGS)
            self._server = VllmServer(config, log_dir=self._log_dir).start()
            self.starts += 1
        return self._server

    def stop(self) -> None:
        """Stop the server's process group and check that none of it is left."""
        server, self._server = self._server, None
        if server is None:
            return
        server.stop()
        try:
            os.killpg(server.pid, 0)
        except ProcessLookupError:
            return
        raise VllmServerError(f"the shared vLLM server's process group {server.pid} outlived stop()")
