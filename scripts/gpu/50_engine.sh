#!/usr/bin/env bash
# Engine on the GPU: fp32 losslessness and bf16 agreement of DDTree / chain vs AR (shipped tiny pair),
# then per-stage round times of a random Qwen3-8B-shaped target + DFlash drafter at batch {1,8,32} x
# budget {8,32,64}, our ops next to the CPU heapq path of today's ports, in one run.
# Writes $STEP_OUT/engine.json and engine.log. Extra arguments go to the benchmark (e.g. --rounds 8).
set -euo pipefail
out="${STEP_OUT:-${OUT:-.}}"
mkdir -p "$out"
python -m sglang_ddtree.bench engine --out "$out/engine.json" "$@" 2>&1 | tee "$out/engine.log"
