#!/usr/bin/env bash
# SGLang 0.5.17 correctness on the GPU with the trained tiny pair (held-out prompts): DDTree through the tree
# kernel (default), through SGLang's FULL_MASK fallback, at page size 16 and 64, with CUDA graphs off (with and
# without overlap), and stock DFLASH, each greedy-compared with the server without speculation; every
# divergence checked against the reference's top-2 log-probs (scripts/sglang_lossless.py). Correctness only:
# servers run in parallel here; speed is measured one server at a time by the ab step.
# The auto budget (SGLANG_DDTREE_BUDGET=auto) is served with and without CUDA graphs.
# env (SG_*): scripts/README.md
set -u
cd "$(dirname "$0")/../.."
OUTD=${STEP_OUT:-${OUT:-/tmp}/sglang}; mkdir -p "$OUTD"
source scripts/gpu/sglang_env.sh
python3 -m sglang_ddtree.check > "$OUTD/check.txt" 2>&1; log "check rc=$?"
declare -A ARGS ENVS
ARGS[base]=""
ARGS[dflash]="$DFLASH_ARGS"
ARGS[dd16]="$(ddtree_args 16)"
ARGS[dd64]="$(ddtree_args 64)"
ARGS[dd16_fullmask]="$(ddtree_args 16)"
ARGS[dd16_page16]="$(ddtree_args 16) --page-size 16"
ARGS[dd16_page64]="$(ddtree_args 16) --page-size 64"
ARGS[dd16_nograph]="$(ddtree_args 16) --disable-cuda-graph"
ARGS[dd16_nograph_nooverlap]="$(ddtree_args 16) --disable-cuda-graph --disable-overlap-schedule"
ENVS[dd16_fullmask]="SGLANG_DDTREE_VERIFY_ATTENTION=full_mask"
ARGS[ddauto]="$DDTREE_AUTO_ARGS"; ENVS[ddauto]="SGLANG_DDTREE_BUDGET=auto"
ARGS[ddauto_nograph]="$DDTREE_AUTO_ARGS --disable-cuda-graph"; ENVS[ddauto_nograph]="SGLANG_DDTREE_BUDGET=auto"
# No flashinfer server here: FlashInfer has no prefill kernel for the tiny pair's head dim 32 (the target's own
# prefill fails, with or without DDTree); flashinfer is served on the 8B-shaped pair (head dim 128) in round_cost.
serve_compare "$OUTD" "$TINY_COMMON" base
log "done"
tar -C "$OUTD" -czf "$OUTD.tar.gz" . && find "$OUTD" -name 'server_*.log' -delete
