"""The simulated CPU KV tier as a vLLM v1 KV connector (scheduler side).

vLLM's scheduler asks its connector, on admitting a request, how many tokens beyond its local
prefix-cache hit can be loaded from elsewhere (`get_num_new_matched_tokens`); those tokens count as
computed and the worker loads them during the step. This connector answers from `CpuKvTier` and
records how many tokens each step loads, so the engine can price the load. The engine plays the
worker: after each step it stores the request's newly full blocks (`save_computed`).
Loads are synchronous (`load_kv_async=False`): the step that admits the request pays for them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from vllm.distributed.kv_transfer.kv_connector.v1.base import (
    KVConnectorBase_V1,
    KVConnectorMetadata,
    KVConnectorRole,
)

from flatshare.sim.cpu_tier import CpuKvTier

if TYPE_CHECKING:
    from vllm.config import VllmConfig
    from vllm.v1.core.kv_cache_manager import KVCacheBlocks
    from vllm.v1.core.sched.output import SchedulerOutput
    from vllm.v1.kv_cache_interface import KVCacheConfig
    from vllm.v1.request import Request

CONNECTOR_NAME = "SimCpuTierConnector"
CONNECTOR_MODULE = "flatshare.sim.connector"


class SimStepLoads(KVConnectorMetadata):
    """What the tier loads in one step, in tokens."""

    def __init__(self, tokens: int) -> None:
        self.tokens = tokens


class SimCpuTierConnector(KVConnectorBase_V1):
    """Scheduler-side connector over a `CpuKvTier`; worker-side methods are never called."""

    def __init__(
        self, vllm_config: VllmConfig, role: KVConnectorRole, kv_cache_config: KVCacheConfig
    ) -> None:
        super().__init__(vllm_config, role, kv_cache_config)
        transfer = vllm_config.kv_transfer_config
        assert transfer is not None
        extra = transfer.kv_connector_extra_config or {}
        self.tier = CpuKvTier(int(extra["cpu_tier_blocks"]))
        self.block_size = vllm_config.cache_config.block_size
        self._pending_tokens = 0
        self.loaded_tokens_total = 0

    def get_num_new_matched_tokens(
        self, request: Request, num_computed_tokens: int
    ) -> tuple[int | None, bool]:
        start = num_computed_tokens // self.block_size
        # Leave at least one token to compute, as vLLM's own prefix cache does.
        room = (request.num_tokens - 1 - num_computed_tokens) // self.block_size
        blocks = min(self.tier.match(request.block_hashes, start), max(room, 0))
        return blocks * self.block_size, False

    def update_state_after_alloc(
        self, request: Request, blocks: KVCacheBlocks, num_external_tokens: int
    ) -> None:
        self._pending_tokens += num_external_tokens

    def build_connector_meta(self, scheduler_output: SchedulerOutput) -> KVConnectorMetadata:
        meta = SimStepLoads(self._pending_tokens)
        self.loaded_tokens_total += self._pending_tokens
        self._pending_tokens = 0
        return meta

    def save_computed(self, request: Request) -> None:
        """Store the request's full, computed blocks in the tier (the worker's write-through copy)."""
        full = request.num_computed_tokens // self.block_size
        self.tier.store(request.block_hashes[:full])

    # Worker side: the simulator has no worker, so these are never called.
    def start_load_kv(self, forward_context: Any, **kwargs: Any) -> None:
        raise NotImplementedError("simulated connector: no worker side")

    def wait_for_layer_load(self, layer_name: str) -> None:
        raise NotImplementedError("simulated connector: no worker side")

    def save_kv_layer(self, layer_name: str, kv_layer: Any, attn_metadata: Any, **kwargs: Any) -> None:
        raise NotImplementedError("simulated connector: no worker side")

    def wait_for_save(self) -> None:
        raise NotImplementedError("simulated connector: no worker side")
