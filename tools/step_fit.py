"""Refit the roofline step-time profiles from the measured GPU timings and rewrite them.

    PYTHONPATH=src python tools/step_fit.py            # refit, rewrite the profiles and the docs' table
    PYTHONPATH=src python tools/step_fit.py --check    # exit 1 if a refit would change a file

Reads `../shared/gpu-profiles/vidur/*/mlp.csv` by path (never copies them), fits each card's linear model
(`flatshare.sim.linear_fit`), assembles the profiles `a100-llama3-8b`, `a40-llama2-7b`, `h100-llama2-7b`
(`flatshare.sim.derive`), derives `llama3-8b-24gb-roofline` from an RTX 4090's spec sheet through the A40's
fitted curve, writes them to `src/flatshare/sim/profiles/`, and the error table into docs/step-model.md.
About half a minute of CPU per card.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from flatshare.sim import derive
from flatshare.sim.error_table import error_table, replace_table
from flatshare.sim.linear_fit import LinearFit, fit_card
from flatshare.sim.measured import CARDS, Card, Measured, Shape, read_measured
from flatshare.sim.profile import StepTimeProfile

REPO = Path(__file__).resolve().parents[1]
PROFILES = REPO / "src" / "flatshare" / "sim" / "profiles"
DOC = REPO / "docs" / "step-model.md"
VIDUR = (
    "vidur's public profiling data (microsoft/vidur 7d47513, MIT licence), read from ../shared/gpu-profiles/"
)

LLAMA3_8B = Shape(hidden=4096, intermediate=14336, heads=32, kv_heads=8)
# vocab, default KV tokens (vLLM's gpu_memory_utilization 0.9, minus weights and activations; blocks of 16)
SETUPS = {
    "a100-llama3-8b": (
        128256,
        434176,
        "0.9 x 79.2 GiB = 71.3 GiB, minus 14.96 GiB of weights and ~3.3 GiB of activations / CUDA graphs: "
        "53.0 GiB = 434,176 tokens of 128 KiB",
    ),
    "a40-llama2-7b": (
        32000,
        53040,
        "0.9 x 44.6 GiB = 40.2 GiB, minus 12.6 GiB of weights and ~2 GiB of activations: 25.9 GiB = "
        "53,040 tokens of 512 KiB",
    ),
    "h100-llama2-7b": (
        32000,
        113552,
        "0.9 x 79.2 GiB = 71.3 GiB, minus 12.6 GiB of weights and ~3.3 GiB of activations: 55.4 GiB = "
        "113,552 tokens of 512 KiB",
    ),
}
# The seed's 24 GB consumer card: an RTX 4090 (Ada AD102): 1,008 GB/s GDDR6X, 165.2 TFLOP/s dense FP16/BF16
# tensor with FP32 accumulate (NVIDIA Ada Lovelace architecture whitepaper, appendix table).
RTX4090 = (1008e9, 165.2e12)
CONSUMER_FROM = "a40-llama2-7b"  # GA102, the RTX 3090's die, GDDR6: the nearest measured card


def measured_profile(card: Card, m: Measured, fitted: LinearFit) -> StepTimeProfile:
    vocab, kv_tokens, kv_note = SETUPS[card.profile]
    setup = derive.Setup(m.shape, card.layers, vocab, card.peak_flops_per_s, kv_tokens)
    lin = fitted.linear
    sources = [
        f"linear: FITTED to {VIDUR}{card.path}: {card.gpu}, {card.model}; the sum of the median columns of one "
        f"layer's token-parallel operations at TP 1, x {card.layers} layers, every token count 1-4,096; "
        f"largest error {fitted.max_abs_error:.1%} (at {fitted.worst_tokens} tokens), median "
        f"{fitted.median_abs_error:.1%} (docs/step-model.md). weight_bytes and flops_per_token: "
        f"{m.shape.layer_params * card.layers / 1e9:.2f}e9 weights of the layers' projections x 2 bytes, x 2 FLOP. "
        f"Fitted: {lin.mem_bytes_per_s / card.peak_mem_bytes_per_s:.0%} of peak bandwidth, "
        f"{lin.flops_per_s / card.peak_flops_per_s:.0%} of peak FLOP/s.",
        f"step_fixed_s: DERIVED: the LM head ({vocab} x {m.shape.hidden} x 2 bytes, not in the measured "
        f"operations) read at the fitted bandwidth, plus {derive.HOST_OVERHEAD_S * 1e3:g} ms of scheduling, "
        "sampling and launches (assumed).",
        f"prefill_attn_pair_s: DERIVED, not measured (attention.csv is not available): 4 x hidden x layers FLOP "
        f"per (query, key) pair at {derive.ATTENTION_EFFICIENCY:.0%} of the peak tensor FLOP/s.",
        "decode_ctx_token_s: DERIVED: a decode reads its whole KV at the fitted bandwidth.",
        f"kv_bytes_per_token: {card.layers} layers x {m.shape.kv_heads} KV heads x "
        f"{m.shape.hidden // m.shape.heads} head dim x 2 (K and V) x 2 bytes.",
        "cpu_load_bytes_per_s: PCIe 4.0 x16, ~25 GB/s effective (assumed).",
        f"default_kv_tokens: {kv_note}.",
    ]
    description = (
        f"{card.model} (bf16) on one {card.gpu}, vLLM with chunked prefill; roofline step model whose linear "
        "part is fitted to measured kernel timings."
    )
    return derive.profile(
        card.profile,
        description,
        lin,
        setup,
        sources,
        derive.fit_summary(fitted, f"../shared/gpu-profiles/{card.path}"),
    )


def consumer_profile(base: Card, fitted: LinearFit) -> StepTimeProfile:
    lin = derive.transfer(
        fitted.linear, (base.peak_mem_bytes_per_s, base.peak_flops_per_s), RTX4090, LLAMA3_8B, 32
    )
    setup = derive.Setup(LLAMA3_8B, 32, 128256, RTX4090[1], 40960)
    sources = [
        "Card assumed: NVIDIA RTX 4090 (24 GB GDDR6X, 1,008 GB/s; 165.2 TFLOP/s dense FP16/BF16 tensor with FP32 "
        "accumulate, the rate vLLM's GEMMs run at; Ada Lovelace whitepaper). Model: Llama-3-8B, bf16, "
        "6.98e9 weights in the layers' projections (13.96 GB) + the LM head (1.05 GB): ~15 GB read a step.",
        f"linear: DERIVED from the spec sheet through the curve FITTED to the {base.gpu} ({base.profile}; GA102, "
        f"the RTX 3090's die): the same fractions of peak bandwidth ({lin.mem_bytes_per_s / RTX4090[0]:.1%}) "
        f"and FLOP/s ({lin.flops_per_s / RTX4090[1]:.1%}), activation bytes per token, knee and tiles. Not "
        "measured on a 4090.",
        f"step_fixed_s: the LM head read at the derived bandwidth plus {derive.HOST_OVERHEAD_S * 1e3:g} ms "
        "(assumed).",
        f"prefill_attn_pair_s: 4 x 4096 x 32 FLOP per pair at {derive.ATTENTION_EFFICIENCY:.0%} of 165.2 TFLOP/s.",
        "decode_ctx_token_s: 131,072 KV bytes per context token at the derived bandwidth.",
        "kv_bytes_per_token: 32 layers x 8 KV heads x 128 head dim x 2 (K and V) x 2 bytes.",
        "cpu_load_bytes_per_s: PCIe 4.0 x16, ~25 GB/s effective; a cached 16k context loads in ~0.08 s.",
        "default_kv_tokens: as llama3-8b-24gb: ~5 GiB of KV = 40,960 tokens.",
        "Seed facts (tests/sim/test_roofline_profiles.py, docs/step-model.md): see the doc for which hold.",
    ]
    description = (
        "Llama-3-8B (bf16) on a 24 GB RTX 4090, vLLM with chunked prefill; roofline step model derived from the "
        "card's spec sheet through the A40's measured curve."
    )
    fit: dict[str, object] = {
        "derived_from": base.profile,
        "card": "RTX 4090",
        "peaks": {"mem_bytes_per_s": RTX4090[0], "flops_per_s": RTX4090[1]},
    }
    return derive.profile("llama3-8b-24gb-roofline", description, lin, setup, sources, fit)


def render(profile: StepTimeProfile) -> str:
    return json.dumps(profile.to_dict(), indent=2) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if a refit would change a file")
    args = parser.parse_args(argv)
    outputs: dict[Path, str] = {}
    fits: dict[str, LinearFit] = {}
    for card in CARDS:
        m = read_measured(card)
        fits[card.profile] = fit_card(m)
        print(f"{card.profile}: largest error {fits[card.profile].max_abs_error:.2%}", file=sys.stderr)
        outputs[PROFILES / f"{card.profile}.json"] = render(measured_profile(card, m, fits[card.profile]))
    base = next(c for c in CARDS if c.profile == CONSUMER_FROM)
    outputs[PROFILES / "llama3-8b-24gb-roofline.json"] = render(consumer_profile(base, fits[CONSUMER_FROM]))
    changed = [p for p, text in outputs.items() if not p.exists() or p.read_text() != text]
    if not args.check:
        for path in changed:
            path.write_text(outputs[path])
        DOC.write_text(replace_table(DOC.read_text(), error_table()))
    for path in changed:
        print(f"{'differs' if args.check else 'wrote'}: {path.relative_to(REPO)}", file=sys.stderr)
    return 1 if args.check and changed else 0


if __name__ == "__main__":
    sys.exit(main())
