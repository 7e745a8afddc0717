"""Fit the H200 profile to flatshare's own whole-step measurement and write what it shows.

    PYTHONPATH=src python tools/gpu_steps.py            # rewrite the profile and docs/results/gpu/h200.md
    PYTHONPATH=src python tools/gpu_steps.py --check    # exit 1 if either would change

Reads `docs/results/gpu/h200-llama3-8b-steps.json` (made by `benchmarks/gpu_step_costs.py` on one H200),
fits the roofline linear model to its passes of 1-4,096 tokens (`flatshare.sim.linear_fit`, as for the
vidur cards) and the two attention coefficients to its attention rows (`flatshare.sim.gpu_steps`), writes
the profile `h200-llama3-8b`, and a page that sets every whole measured step beside the profile's price, the
additive model's, and the predictions made without this card (the other cards' curves moved to the H200's
spec sheet; the attention terms derived as the other profiles derive them).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

import numpy as np

from flatshare.sim import derive
from flatshare.sim.gpu_steps import AttentionFit, StepsFile, fit_attention, median_abs, priced, read_steps
from flatshare.sim.linear_fit import LinearFit, fit_card, point_errors, score, sig
from flatshare.sim.measured import CARDS, Card
from flatshare.sim.profile import StepTimeProfile, load_profile

REPO = Path(__file__).resolve().parents[1]
DATA = "docs/results/gpu/h200-llama3-8b-steps.json"
PROFILE = REPO / "src" / "flatshare" / "sim" / "profiles" / "h200-llama3-8b.json"
PAGE = REPO / "docs" / "results" / "gpu" / "h200.md"
# NVIDIA H200 SXM datasheet: 141 GB HBM3e at 4.8 TB/s; dense BF16 tensor 989 TFLOP/s (the H100's rate).
H200 = Card(
    "h200-llama3-8b",
    DATA,
    "H200 141 GB (SXM: 4,800 GB/s HBM3e, 989 TFLOP/s dense bf16)",
    "Llama-3-8B",
    32,
    989e12,
    4.8e12,
)
VOCAB = 128256
GIB = 2**30


def kv_tokens(m: StepsFile) -> tuple[int, str]:
    """vLLM's KV on the card at gpu_memory_utilization 0.9, as the other profiles count it."""
    total_gib = 143771 / 1024  # nvidia-smi's memory.total on the measured card, MiB
    weights_gib = (m.info["params"] + VOCAB * m.shape.hidden * 2) * 2 / GIB  # layers + embedding and LM head
    kv_gib = 0.9 * total_gib - weights_gib - 3.3
    per_token = derive.Setup(m.shape, m.layers, VOCAB, H200.peak_flops_per_s, 1).kv_bytes_per_token
    tokens = int(kv_gib * GIB / per_token) // 16 * 16
    note = (
        f"0.9 x {total_gib:.1f} GiB = {0.9 * total_gib:.1f} GiB, minus {weights_gib:.2f} GiB of weights and ~3.3 GiB "
        f"of activations / CUDA graphs: {kv_gib:.1f} GiB = {tokens:,} tokens of {per_token // 1024} KiB"
    )
    return tokens, note


def build_profile(m: StepsFile, fitted: LinearFit, att: AttentionFit) -> StepTimeProfile:
    tokens, note = kv_tokens(m)
    setup = derive.Setup(m.shape, m.layers, VOCAB, H200.peak_flops_per_s, tokens)
    lin = fitted.linear
    info = m.info
    measured_by = (
        f"measured by flatshare (benchmarks/gpu_step_costs.py, {DATA}): {info['device']}, torch {info['torch']}, "
        f"CUDA {info['cuda']}, bf16, CUDA graphs, median of {info['replays']} replays"
    )
    sources = [
        f"linear: FITTED to passes of 1-4,096 tokens {measured_by}; a Llama-3-8B-shaped model with random "
        f"weights, all 32 layers' token-parallel work; largest error {fitted.max_abs_error:.1%} (at "
        f"{fitted.worst_tokens:,} tokens), median {fitted.median_abs_error:.1%} (docs/results/gpu/h200.md). "
        f"Fitted: {lin.mem_bytes_per_s / H200.peak_mem_bytes_per_s:.0%} of peak bandwidth, "
        f"{lin.flops_per_s / H200.peak_flops_per_s:.0%} of peak FLOP/s.",
        f"step_fixed_s: DERIVED: the LM head ({VOCAB} x {m.shape.hidden} x 2 bytes, not measured) read at the "
        f"fitted bandwidth, plus {derive.HOST_OVERHEAD_S * 1e3:g} ms of scheduling, sampling and launches (assumed).",
        f"prefill_attn_pair_s: FITTED to {len(m.prefill)} prefill-attention rows (chunks of 64-2,048 tokens after "
        f"0-16k tokens; PyTorch's FlashAttention-2 kernel; relative least squares; median error "
        f"{median_abs(att.prefill_errors):.0%}).",
        f"decode_ctx_token_s: FITTED to {len(m.decode)} decode-attention rows (1-64 decodes over 1k-32k tokens "
        f"of KV; median error {median_abs(att.decode_errors):.0%}).",
        "kv_bytes_per_token: 32 layers x 8 KV heads x 128 head dim x 2 (K and V) x 2 bytes.",
        "cpu_load_bytes_per_s: PCIe 5.0 x16 would allow more; ~25 GB/s effective kept as for the other cards "
        "(assumed, not measured).",
        f"default_kv_tokens: {note}.",
    ]
    description = (
        "Llama-3-8B (bf16) on one H200 141 GB, vLLM with chunked prefill; roofline step model whose linear part "
        "and attention terms are fitted to whole-step timings flatshare measured on the card."
    )
    base = derive.profile(
        H200.profile,
        description,
        lin,
        setup,
        sources,
        derive.fit_summary(fitted, DATA) | {"measured_by": measured_by},
    )
    return dataclasses.replace(
        base, prefill_attn_pair_s=sig(att.prefill_attn_pair_s), decode_ctx_token_s=sig(att.decode_ctx_token_s)
    )


def straight_line(m: StepsFile, low: int, high: int) -> tuple[float, float]:
    """Least squares a + b * tokens over the linear rows with low <= tokens <= high."""
    rows = [(n, s) for n, s in m.linear if low <= n <= high]
    b, a = np.polyfit([n for n, _ in rows], [s for _, s in rows], 1)
    return float(a), float(b)


def pct(x: float) -> str:
    return f"{x:+.0%}"


def page(m: StepsFile, fitted: LinearFit, profile: StepTimeProfile, att: AttentionFit) -> str:
    info = m.info
    assert profile.linear is not None
    lines = [
        "# Step costs measured on an H200 (Llama-3-8B shape)",
        "",
        "Generated by `tools/gpu_steps.py` from `h200-llama3-8b-steps.json` beside this page (made by",
        f"`benchmarks/gpu_step_costs.py`: {info['device']}, torch {info['torch']}, CUDA {info['cuda']}; copy",
        f"bandwidth {info['copy_bytes_per_s'] / 1e12:.2f} TB/s and bf16 matrix rate "
        f"{info['bf16_matmul_flops_per_s'] / 1e12:.0f} TFLOP/s measured first; every row the median of "
        f"{info['replays']} CUDA-graph replays, all 32 layers). `h200-llama3-8b-steps-repeat.log` is a second",
        "run on another machine of the same kind (rows agree within a few percent). The LM head, sampling and",
        "the host are not in the measurement; attention runs PyTorch's FlashAttention-2 kernel on contiguous KV",
        "(vLLM runs FlashAttention over a paged cache).",
        "",
        "## Linear work: the fit (1-4,096 tokens) and one prediction (8,192)",
        "",
        "| tokens | measured ms | profile ms | error |",
        "|---|---|---|---|",
    ]
    for e in point_errors(profile.linear, m.measured(H200, max_tokens=10**9)):
        lines.append(f"| {e.tokens:,} | {e.measured_s * 1e3:.2f} | {e.model_s * 1e3:.2f} | {e.error:+.1%} |")
    lines += [
        "",
        f"Fitted on 1-4,096 tokens: largest error {fitted.max_abs_error:.1%} (at {fitted.worst_tokens:,}), "
        f"median {fitted.median_abs_error:.1%}; 8,192 is a prediction.",
        "",
        "**Predicted without this card** (the other cards' fitted curves moved to the H200's spec sheet and the",
        "Llama-3-8B shape, `flatshare.sim.derive.transfer`, the way the 24 GB consumer profile is made):",
        "",
        "| curve from | largest error | median error | at 1 token | at 512 |",
        "|---|---|---|---|---|",
    ]
    lin_meas = m.measured(H200)
    for card in CARDS:
        source = load_profile(card.profile).linear
        assert source is not None
        moved = derive.transfer(
            source,
            (card.peak_mem_bytes_per_s, card.peak_flops_per_s),
            (H200.peak_mem_bytes_per_s, H200.peak_flops_per_s),
            m.shape,
            m.layers,
        )
        errs = {e.tokens: e.error for e in point_errors(moved, lin_meas)}
        lines.append(
            f"| `{card.profile}` | {max(errs.values(), key=abs):+.0%} | {median_abs(list(errs.values())):.0%} | "
            f"{pct(errs[1])} | {pct(errs[512])} |"
        )
    derived = derive.profile(
        "derived",
        "",
        profile.linear,
        derive.Setup(m.shape, m.layers, VOCAB, H200.peak_flops_per_s, 1),
        [],
        {},
    )
    lines += [
        "",
        "## Attention: fitted coefficients against the derivation the other profiles use",
        "",
        "| coefficient | fitted here | derived as the vidur cards' profiles derive it | derived / fitted | fit's median error |",
        "|---|---|---|---|---|",
        f"| decode, s per context token (all layers) | {att.decode_ctx_token_s:.3g} | {derived.decode_ctx_token_s:.3g} "
        f"(KV read at the fitted linear bandwidth) | {derived.decode_ctx_token_s / att.decode_ctx_token_s:.2f} | "
        f"{median_abs(att.decode_errors):.0%} |",
        f"| prefill, s per (query, key) pair | {att.prefill_attn_pair_s:.3g} | {derived.prefill_attn_pair_s:.3g} "
        f"(50% of peak FLOP/s) | {derived.prefill_attn_pair_s / att.prefill_attn_pair_s:.2f} | "
        f"{median_abs(att.prefill_errors):.0%} |",
        "",
        "| decodes x context | measured ms | fitted ms | error |",
        "|---|---|---|---|",
    ]
    for (b, c, sec), err in zip(m.decode, att.decode_errors, strict=True):
        lines.append(f"| {b} x {c:,} | {sec * 1e3:.2f} | {sec * (1 + err) * 1e3:.2f} | {err:+.0%} |")
    lines += ["", "| chunk after context | measured ms | fitted ms | error |", "|---|---|---|---|"]
    for (n, p, sec), err in zip(m.prefill, att.prefill_errors, strict=True):
        lines.append(f"| {n:,} after {p:,} | {sec * 1e3:.2f} | {sec * (1 + err) * 1e3:.2f} | {err:+.0%} |")
    a_hi, b_hi = straight_line(m, 512, 4096)
    a_lo, b_lo = straight_line(m, 1, 128)

    def additive(row_tokens: int, attention_s: float, a: float, b: float) -> float:
        return a + b * row_tokens + attention_s

    lines += [
        "",
        "## Whole steps: measured against the models",
        "",
        "Each model prices the step's linear work its own way and its attention with the coefficients fitted",
        "above. `roofline` is this profile; `additive, compute slope` is the best straight line through the",
        "passes of 512-4,096 tokens, `additive, flat part` through those of 1-128 (what an additive model can be",
        "fitted to). The increment columns are the step's cost over the first row's (24 decodes alone).",
        "",
        "| step | measured ms | roofline | additive, compute slope | additive, flat part | measured increment | roofline's | compute slope's |",
        "|---|---|---|---|---|---|---|---|",
    ]
    base = m.steps[0]
    roof0 = priced(profile, base)
    parts0 = profile.step_parts(base.work())
    add_hi0 = additive(base.decodes + base.voice + base.chunk, parts0.attention_s, a_hi, b_hi)
    for row in m.steps:
        parts = profile.step_parts(row.work())
        roof = priced(profile, row)
        tokens = row.decodes + row.voice + row.chunk
        hi = additive(tokens, parts.attention_s, a_hi, b_hi)
        lo = additive(tokens, parts.attention_s, a_lo, b_lo)
        same_base = row.decodes == base.decodes and row.decode_ctx == base.decode_ctx and row.voice == 0
        inc = (
            f"{pct(row.seconds / base.seconds - 1)} | {pct(roof / roof0 - 1)} | {pct(hi / add_hi0 - 1)}"
            if same_base and row is not base
            else "| |"
        )
        lines.append(
            f"| {row.label} | {row.seconds * 1e3:.2f} | {roof * 1e3:.2f} ({pct(roof / row.seconds - 1)}) | "
            f"{hi * 1e3:.2f} ({pct(hi / row.seconds - 1)}) | {lo * 1e3:.2f} ({pct(lo / row.seconds - 1)}) | {inc} |"
        )
    roof_err = [priced(profile, r) / r.seconds - 1 for r in m.steps]
    lines += [
        "",
        f"Roofline over the {len(m.steps)} whole steps: median error {median_abs(roof_err):.0%}, largest "
        f"{max(roof_err, key=abs):+.0%}. Its parts were fitted to the linear and attention rows; the whole steps",
        "were not fitted to: they test whether a step's cost is the sum of its linear pass and its attention.",
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if a refit would change a file")
    args = parser.parse_args(argv)
    m = read_steps(REPO / DATA)
    # --check rebuilds the profile around the shipped linear fit (a refit takes a minute of CPU; the fit is held
    # to every measured pass by tests/sim/test_gpu_steps.py) and compares both files.
    shipped = load_profile(H200.profile).linear if args.check else None
    linear = score(shipped, m.measured(H200)) if shipped else fit_card(m.measured(H200))
    att = fit_attention(m)
    profile = build_profile(m, linear, att)
    outputs = {PROFILE: json.dumps(profile.to_dict(), indent=2) + "\n", PAGE: page(m, linear, profile, att)}
    changed = [p for p, text in outputs.items() if not p.exists() or p.read_text() != text]
    for path in changed:
        if not args.check:
            path.write_text(outputs[path])
        print(f"{'differs' if args.check else 'wrote'}: {path.relative_to(REPO)}", file=sys.stderr)
    return 1 if args.check and changed else 0


if __name__ == "__main__":
    sys.exit(main())
