#!/usr/bin/env bash
# The co-location experiment on one GPU against real `vllm serve` engines, a reduced plan that finishes
# in under 10 minutes: stock vLLM (`vllm-priority`) and make-room (`make-room-t48`), 2 voice callers
# beside 24 coding agents for 150 s each, one seed, the seed preset's setup at full scale (16k-token
# agent contexts, 45,056 KV tokens, an 8 GiB CPU tier through vLLM's offloading connector).
# docs/gpu.md explains each choice and what to run next.
#
#   benchmarks/gpu_colocation.sh [--dry-run] [-- more experiment options]
#
# --dry-run prints the plan and the `vllm serve` command of each condition, and starts nothing (no GPU
# needed). Environment: MODEL (an 8B Llama; default meta-llama/Llama-3.1-8B-Instruct, a folder works),
# OUT (the experiment folder, default ./colocation-gpu), FLATSHARE (the command, default `flatshare`).
set -euo pipefail

MODEL=${MODEL:-meta-llama/Llama-3.1-8B-Instruct}
OUT=${OUT:-colocation-gpu}
read -r -a FLATSHARE <<<"${FLATSHARE:-flatshare}"
extra=()
while (($#)); do
    case $1 in
        --dry-run) extra+=(--dry-run) ;;
        --) shift; extra+=("$@"); break ;;
        *) echo "usage: $0 [--dry-run] [-- more experiment options]" >&2; exit 2 ;;
    esac
    shift
done

exec "${FLATSHARE[@]}" experiment colocation \
    --engine vllm --device gpu --model "$MODEL" --out "$OUT" \
    --conditions vllm-priority,make-room-t48 --callers 2 --agents 24 --seeds 1 \
    --duration 150 --drain 30 --server-timeout 300 \
    --vllm-arg=--gpu-memory-utilization=0.9 \
    "${extra[@]}"
