"""Measure what one vLLM-style forward step costs on a GPU: linear work, attention, and whole mixed steps.

    python benchmarks/gpu_step_costs.py --out steps.json            # on a CUDA GPU (about 3 minutes)
    python benchmarks/gpu_step_costs.py --smoke --out smoke.json    # tiny shapes on the CPU (a test runs it)

Needs only PyTorch, so it runs on a bare GPU machine without vLLM or flatshare installed. It builds one
Llama-3-8B-shaped model (32 layers, hidden 4,096, 32 query and 8 KV heads of 128, gated MLP of 14,336;
bf16, random weights: timings do not depend on the values) and times, each as a whole forward pass of all
layers captured in a CUDA graph (as vLLM runs its steps) and replayed:

- ``linear``: passes of n tokens through every layer's token-parallel work (norms, QKV, rotary-like
  elementwise, output projection, residual adds, MLP), no attention: what vidur's ``mlp.csv`` sums;
- ``decode_attention``: b decodes each reading c tokens of KV (grouped-query attention, one query token);
- ``prefill_attention``: a chunk of n new tokens attending causally to p earlier tokens and to itself;
- ``steps``: whole mixed steps (linear + every attention), the shapes the co-location problem is about:
  decodes of 16k-token agent contexts beside a prefill chunk of 0-2,048 tokens, and a voice decode beside them.

The whole steps check whether a step's cost is the sum of its parts and how much a prefill chunk adds to a
batch of decodes. Attention uses PyTorch's scaled_dot_product_attention on contiguous KV (vLLM uses
FlashAttention over a paged cache; the kernels are of the same family, the paging adds a little). The
LM head and sampling are not included (vLLM runs them once a step, outside the layers).
Writes one JSON file: the device, PyTorch's version, the copy bandwidth and bf16 matrix rate measured
first, and every configuration's median seconds over the replays with its spread.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

# The kernels tried in order for each kind of attention; the first that accepts the shapes is used and recorded.
BACKENDS = (
    SDPBackend.FLASH_ATTENTION,
    SDPBackend.CUDNN_ATTENTION,
    SDPBackend.EFFICIENT_ATTENTION,
    SDPBackend.MATH,
)


@dataclass(frozen=True)
class Shape:
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    intermediate: int

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads


LLAMA3_8B = Shape(layers=32, hidden=4096, heads=32, kv_heads=8, intermediate=14336)
SMOKE = Shape(layers=2, hidden=64, heads=4, kv_heads=2, intermediate=128)

LINEAR_TOKENS = (
    1,
    8,
    16,
    24,
    32,
    48,
    64,
    96,
    128,
    192,
    256,
    384,
    512,
    768,
    1024,
    1536,
    2048,
    3072,
    4096,
    8192,
)
DECODE = (
    (1, 1024),
    (1, 16384),
    (8, 4096),
    (8, 16384),
    (24, 4096),
    (24, 16384),
    (64, 4096),
    (64, 16384),
    (32, 32768),
)
PREFILL = ((256, 0), (512, 0), (2048, 0), (512, 4096), (512, 16384), (2048, 16384), (64, 16384), (256, 16384))
# (decodes, their context, prefill chunk tokens, the chunk's earlier context, voice decodes at 4k context)
STEPS = (
    *((24, 16384, chunk, 16384, 0) for chunk in (0, 16, 32, 64, 128, 256, 512, 2048)),
    (24, 16384, 0, 0, 1),
    (24, 16384, 64, 16384, 1),
    (2, 16384, 0, 0, 1),
    (2, 16384, 512, 16384, 1),
    (0, 0, 512, 16384, 1),
    (0, 0, 0, 0, 1),
)


class Layers:
    """The model's weights, all layers, bf16 (random, small)."""

    def __init__(self, shape: Shape, device: torch.device, dtype: torch.dtype) -> None:
        s = shape
        qkv = s.hidden + 2 * s.kv_heads * s.head_dim

        def w(rows: int, cols: int) -> torch.Tensor:
            return torch.randn(rows, cols, device=device, dtype=dtype) * (1.0 / math.sqrt(cols))

        self.shape = s
        self.qkv = [w(qkv, s.hidden) for _ in range(s.layers)]
        self.out = [w(s.hidden, s.hidden) for _ in range(s.layers)]
        self.gate_up = [w(2 * s.intermediate, s.hidden) for _ in range(s.layers)]
        self.down = [w(s.hidden, s.intermediate) for _ in range(s.layers)]
        self.norm = torch.ones(s.hidden, device=device, dtype=dtype)

    def params(self) -> int:
        return sum(t.numel() for group in (self.qkv, self.out, self.gate_up, self.down) for t in group)


@dataclass(frozen=True)
class Batch:
    """One step's work: decodes at a context, a prefill chunk after earlier context, voice decodes."""

    decodes: int
    decode_ctx: int
    chunk: int
    chunk_ctx: int
    voice: int = 0
    voice_ctx: int = 4096

    @property
    def tokens(self) -> int:
        return self.decodes + self.chunk + self.voice


def rms_norm(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    return x * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-5).to(x.dtype) * weight


class Step:
    """A forward pass over every layer for one batch, with preallocated inputs and KV (shared by layers)."""

    def __init__(self, model: Layers, batch: Batch, attention: bool, linear: bool = True) -> None:
        s = model.shape
        dev, dt = model.norm.device, model.norm.dtype
        self.model, self.batch, self.attention, self.linear = model, batch, attention, linear
        self.x = torch.randn(max(batch.tokens, 1), s.hidden, device=dev, dtype=dt)
        hd, kvh = s.head_dim, s.kv_heads

        def kv(b: int, c: int) -> torch.Tensor | None:
            return torch.randn(2, b, kvh, c, hd, device=dev, dtype=dt) if b and c else None

        self.decode_kv = kv(batch.decodes, batch.decode_ctx)
        self.voice_kv = kv(batch.voice, batch.voice_ctx)
        self.context_kv = kv(1, batch.chunk_ctx)
        self.chunk_kv = kv(1, batch.chunk)
        self.qkv = torch.randn(max(batch.tokens, 1), s.hidden + 2 * kvh * hd, device=dev, dtype=dt)
        self.backends: dict[str, SDPBackend] = {}

    def _sdpa(
        self, kind: str, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, **kw: object
    ) -> torch.Tensor:
        """Attention through the first kernel (BACKENDS) that takes these shapes; chosen once per kind."""
        if kind not in self.backends:
            for backend in BACKENDS:
                try:
                    with sdpa_kernel([backend]):
                        F.scaled_dot_product_attention(q, k, v, **kw)  # type: ignore[arg-type]
                except RuntimeError:
                    continue
                self.backends[kind] = backend
                break
            else:
                raise RuntimeError(f"no attention kernel takes the {kind} shapes")
        with sdpa_kernel([self.backends[kind]]):
            return F.scaled_dot_product_attention(q, k, v, **kw)  # type: ignore[arg-type]

    def _decode_attn(self, kind: str, q: torch.Tensor, kv: torch.Tensor) -> torch.Tensor:
        # One query token per request: fold the query heads that share a KV head into the query axis, so the
        # kernel reads each KV head once (grouped-query attention) without a mask.
        s = self.model.shape
        b = q.shape[0]
        qg = q.reshape(b, s.kv_heads, s.heads // s.kv_heads, s.head_dim)
        return self._sdpa(kind, qg, kv[0], kv[1]).reshape(b, s.hidden)

    def _chunk_attn(self, q: torch.Tensor) -> torch.Tensor:
        """A prefill chunk of n tokens after p earlier ones: the n queries against the p earlier keys (no mask;
        the query heads folded onto their KV head as for decodes) plus the chunk against itself (causal,
        grouped-query). The two halves are added, not merged by their softmax sums: the merge is a small
        elementwise pass, and the numbers are not used."""
        s, bt = self.model.shape, self.batch
        n, p, group = bt.chunk, bt.chunk_ctx, s.heads // s.kv_heads
        assert self.chunk_kv is not None
        k, v = self.chunk_kv[0], self.chunk_kv[1]
        heads = q.reshape(n, s.heads, s.head_dim).transpose(0, 1).unsqueeze(0)  # (1, heads, n, d)
        own = self._sdpa("prefill-self", heads, k, v, is_causal=True, enable_gqa=True)
        out = own.squeeze(0).transpose(0, 1).reshape(n, s.hidden)
        if p and self.context_kv is not None:
            folded = heads.reshape(1, s.kv_heads, group * n, s.head_dim)
            earlier = self._sdpa("prefill-context", folded, self.context_kv[0], self.context_kv[1])
            out = out + earlier.reshape(n, s.hidden)
        return out

    def _attention(self, qkv: torch.Tensor) -> torch.Tensor:
        s, bt = self.model.shape, self.batch
        q = qkv[:, : s.hidden]
        parts = []
        at = 0
        for kind, count, kv in (("decode", bt.decodes, self.decode_kv), ("voice", bt.voice, self.voice_kv)):
            if count and kv is not None:
                parts.append(self._decode_attn(kind, q[at : at + count], kv))
            at += count
        if bt.chunk and self.chunk_kv is not None:
            parts.append(self._chunk_attn(q[at : at + bt.chunk]))
        return torch.cat(parts) if parts else q

    def __call__(self) -> torch.Tensor:
        m = self.model
        if not self.linear:  # attention alone, every layer, on fixed queries
            out = self.qkv
            for _ in range(m.shape.layers):
                out = self._attention(self.qkv)
            return out
        x = self.x
        for i in range(m.shape.layers):
            h = rms_norm(x, m.norm)
            qkv = h @ m.qkv[i].T
            qkv = qkv * 1.0001  # stands in for rotary embedding's elementwise pass
            attn = self._attention(qkv) if self.attention else qkv[:, : m.shape.hidden]
            x = x + attn @ m.out[i].T
            h = rms_norm(x, m.norm)
            gu = h @ m.gate_up[i].T
            g, u = gu.chunk(2, dim=-1)
            x = x + (F.silu(g) * u) @ m.down[i].T
        return x


def timed(fn: Callable[[], object], replays: int, graphs: bool) -> tuple[float, float, float]:
    """Median, lowest and highest seconds of one call over `replays`, after warm-up; on a GPU timed with CUDA
    events, and replayed from a CUDA graph when `graphs`."""
    cuda = torch.cuda.is_available()
    run: Callable[[], object] = fn
    if cuda and graphs:
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for _ in range(2):
                fn()
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            fn()
        run = graph.replay
    for _ in range(3):
        run()
    samples = []
    for _ in range(replays):
        if cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            run()
            end.record()
            end.synchronize()
            samples.append(start.elapsed_time(end) * 1e-3)
        else:
            t0 = time.perf_counter()
            run()
            samples.append(time.perf_counter() - t0)
    return statistics.median(samples), min(samples), max(samples)


def device_ceilings(device: torch.device) -> dict[str, float]:
    """Copy bandwidth (bytes read + written per second) and bf16 matrix rate, as this card gives them."""
    if device.type != "cuda":
        return {}
    src = torch.empty(2**30, dtype=torch.uint8, device=device)  # 1 GiB
    dst = torch.empty_like(src)
    copy_s, _, _ = timed(lambda: dst.copy_(src), 10, graphs=False)
    mat = torch.randn(8192, 8192, device=device, dtype=torch.bfloat16)
    mm_s, _, _ = timed(lambda: mat @ mat, 10, graphs=False)
    return {"copy_bytes_per_s": 2 * 2**30 / copy_s, "bf16_matmul_flops_per_s": 2 * 8192**3 / mm_s}


def scaled(smoke: bool) -> tuple[tuple, tuple, tuple, tuple]:
    if not smoke:
        return LINEAR_TOKENS, DECODE, PREFILL, STEPS
    return (1, 8, 64), ((2, 512),), ((16, 512),), ((2, 512, 16, 512, 1), (2, 64, 0, 0, 0))


def measure(
    shape: Shape, device: torch.device, replays: int, smoke: bool, log: Callable[[str], None]
) -> dict:
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    torch.manual_seed(0)
    model = Layers(shape, device, dtype)
    linear_tokens, decode, prefill, steps = scaled(smoke)
    graphs = device.type == "cuda"
    result: dict = {"linear": [], "decode_attention": [], "prefill_attention": [], "steps": []}

    def record(kind: str, fields: dict, fn: Callable[[], object]) -> None:
        median, low, high = timed(fn, replays, graphs)
        kernels = {k: b.name for k, b in getattr(fn, "backends", {}).items()}
        result[kind].append({**fields, "seconds": median, "low_s": low, "high_s": high, "kernels": kernels})
        log(f"{kind:18s} {json.dumps(fields):70s} {median * 1e3:9.3f} ms")
        if device.type == "cuda":
            torch.cuda.empty_cache()

    with torch.inference_mode():
        for n in linear_tokens:
            record("linear", {"tokens": n}, Step(model, Batch(n, 0, 0, 0), attention=False))
        for b, c in decode:
            step = Step(model, Batch(b, c, 0, 0), attention=True, linear=False)
            record("decode_attention", {"decodes": b, "context": c}, step)
        for n, p in prefill:
            step = Step(model, Batch(0, 0, n, p), attention=True, linear=False)
            record("prefill_attention", {"chunk": n, "context": p}, step)
        for d, dc, n, p, v in steps:
            batch = Batch(d, dc, n, p, voice=v)
            record("steps", asdict(batch), Step(model, batch, attention=True))
    result["params"] = model.params()
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="the JSON file to write")
    parser.add_argument(
        "--smoke", action="store_true", help="tiny shapes on the CPU (checks the script runs)"
    )
    parser.add_argument("--replays", type=int, default=20, help="timed replays per configuration")
    args = parser.parse_args(argv)
    if args.replays < 1:
        parser.error("--replays must be at least 1")
    if args.smoke:
        device, shape = torch.device("cpu"), SMOKE
    elif torch.cuda.is_available():
        device, shape = torch.device("cuda"), LLAMA3_8B
    else:
        print("error: no CUDA device (use --smoke to check the script on a CPU)", file=sys.stderr)
        return 2
    started = time.time()

    def log(line: str) -> None:
        print(f"[{time.time() - started:6.1f}s] {line}", flush=True)

    info = {
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "shape": asdict(shape),
        "dtype": "bfloat16" if device.type == "cuda" else "float32",
        "replays": args.replays,
        "cuda_graphs": device.type == "cuda",
        "attention": "torch scaled_dot_product_attention, contiguous KV (backend chosen by PyTorch)",
    }
    info.update(device_ceilings(device))
    log(f"device {info['device']}, torch {info['torch']}")
    result = measure(shape, device, args.replays, args.smoke, log)
    info["params"] = result.pop("params")
    info["wall_s"] = time.time() - started
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"info": info, **result}, indent=1) + "\n")
    log(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
