"""An offline Hugging Face cache holding only `config.json` for the text models vLLM's scheduler tests name.

vLLM's test factories build `ModelConfig(model="facebook/opt-125m", ...)`, which reads the model's
`config.json` from the Hub. This machine has no Hub access, so the runner points `HF_HOME` at a cache
written here (hub layout: `models--org--name/refs/main` and `snapshots/<rev>/config.json`) and sets
`HF_HUB_OFFLINE=1`. The values are each model's public architecture numbers; the scheduler only reads
sizes and the architecture name from them. Multimodal models (llava, Qwen2.5-VL) are left out: their
tests need processors and tokenizers too and fail the same way in every mode (environment failures).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

_REVISION = "0" * 40

_OPT = {
    "model_type": "opt",
    "architectures": ["OPTForCausalLM"],
    "vocab_size": 50272,
    "torch_dtype": "float16",
}
_OPT |= {"max_position_embeddings": 2048, "bos_token_id": 2, "eos_token_id": 2, "pad_token_id": 1}

CONFIGS: dict[str, dict[str, Any]] = {
    "facebook/opt-125m": _OPT
    | {
        "hidden_size": 768,
        "num_attention_heads": 12,
        "num_hidden_layers": 12,
        "ffn_dim": 3072,
        "word_embed_proj_dim": 768,
        "do_layer_norm_before": True,
    },
    "facebook/opt-350m": _OPT
    | {
        "hidden_size": 1024,
        "num_attention_heads": 16,
        "num_hidden_layers": 24,
        "ffn_dim": 4096,
        "word_embed_proj_dim": 512,
        "do_layer_norm_before": False,
    },
    "Qwen/Qwen3-0.6B": {
        "model_type": "qwen3",
        "architectures": ["Qwen3ForCausalLM"],
        "hidden_size": 1024,
        "intermediate_size": 3072,
        "num_hidden_layers": 28,
        "num_attention_heads": 16,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "vocab_size": 151936,
        "max_position_embeddings": 40960,
        "rope_theta": 1000000,
        "rms_norm_eps": 1e-6,
        "tie_word_embeddings": True,
        "torch_dtype": "bfloat16",
        "bos_token_id": 151643,
        "eos_token_id": 151645,
    },
}


def write_cache(hf_home: Path) -> Path:
    """Write the configs under `hf_home/hub` (idempotent) and return `hf_home`."""
    for repo_id, config in CONFIGS.items():
        repo = hf_home / "hub" / ("models--" + repo_id.replace("/", "--"))
        snapshot = repo / "snapshots" / _REVISION
        snapshot.mkdir(parents=True, exist_ok=True)
        (repo / "refs").mkdir(exist_ok=True)
        (repo / "refs" / "main").write_text(_REVISION)
        (snapshot / "config.json").write_text(json.dumps(config, indent=1, sort_keys=True) + "\n")
    return hf_home
