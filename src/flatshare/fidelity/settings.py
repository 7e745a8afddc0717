"""The simulator's engine settings for a fidelity run: the server's, unless given otherwise.

vLLM exports its block size, KV blocks (`vllm:cache_config_info`) and `max_model_len` (`/v1/models`),
so those default to the server's (0); `max_num_batched_tokens` and `max_num_seqs` are not exported
and must be given as the server was started. A value that differs from what the server reports is
kept (a deliberate mismatch is how one checks that the comparison can fail) and listed in `mismatches`.
"""

from __future__ import annotations

from dataclasses import dataclass

from flatshare.errors import InputError
from flatshare.fidelity.probes import ServerInfo
from flatshare.sim.config import DEFAULT_ENGINE, EngineConfig
from flatshare.sim.options import make_room_settings

DEFAULT_MAKE_ROOM = '{"enabled": true}'
PROBE_VOCAB_SIZE = 512
"""Prompt token ids are drawn below this by default: the vocabulary of the tiny test model
(`flatshare.testing.tiny_model`), so the defaults work against it and any larger model."""


@dataclass(frozen=True)
class EngineSettings:
    block_size: int = 0
    kv_blocks: int = 0
    max_num_batched_tokens: int = DEFAULT_ENGINE.max_num_batched_tokens
    max_num_seqs: int = DEFAULT_ENGINE.max_num_seqs
    max_model_len: int = 0

    def config(
        self, info: ServerInfo, scheduler: str, policy: str, make_room: str
    ) -> tuple[EngineConfig, list[str]]:
        """The EngineConfig and the list of settings that differ from the server's."""
        if min(self.block_size, self.kv_blocks, self.max_model_len) < 0:
            raise InputError("--block-size, --kv-blocks and --max-model-len must be >= 0 (0: the server's)")
        block = self.block_size or info.block_size
        blocks = self.kv_blocks or info.num_gpu_blocks
        model_len = self.max_model_len or info.max_model_len
        mismatches = [
            f"{name} {mine} (server {theirs})"
            for name, mine, theirs in (
                ("block size", block, info.block_size),
                ("KV blocks", blocks, info.num_gpu_blocks),
                ("max model length", model_len, info.max_model_len),
            )
            if mine != theirs
        ]
        if model_len > (blocks - 1) * block:
            raise InputError(
                f"max model length {model_len} does not fit {blocks} KV blocks of {block}: vLLM keeps one "
                f"block back and refuses to start unless max_model_len <= {(blocks - 1) * block}"
            )
        if scheduler == "make-room" and not make_room:
            make_room = DEFAULT_MAKE_ROOM
        additional = {"make_room": make_room_settings(make_room)} if make_room else {}
        config = EngineConfig(
            block_size=block,
            kv_tokens=blocks * block,
            max_num_batched_tokens=self.max_num_batched_tokens,
            max_num_seqs=self.max_num_seqs,
            policy=policy,
            max_model_len=model_len,
            scheduler=scheduler,
            additional_config=additional,
        )
        return config, mismatches
