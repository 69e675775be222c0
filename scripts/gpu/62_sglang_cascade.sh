#!/usr/bin/env bash
# The FlashInfer prefix cascade served (issue 28), greedy against the server without speculation, on the trained
# tiny pair inflated to head dim 128 (scripts/inflate_pair.py: the tiny pair's function in shapes FlashInfer's
# prefill takes; real acceptance): DDTree's auto budget with SGLANG_DDTREE_PREFIX=flashinfer on triton and on
# flashinfer, at page sizes 16 and 64, without CUDA graphs, and the tree kernel over the whole prefix as before;
# the drafter's attention through the cascade too (dd_draft_cascade, _fi); the served default (dd_default).
# Correctness only (servers in parallel). env (SG_*): scripts/README.md
set -u
cd "$(dirname "$0")/../.."
OUTD=${STEP_OUT:-${OUT:-/tmp}/cascade}; mkdir -p "$OUTD"
source scripts/gpu/sglang_env.sh
P=/tmp/inflated-d128
[ -f $P/target/config.json ] || python3 scripts/inflate_pair.py --out $P --hidden 512 --layers 5 --heads 4 \
  --kv-heads 2 --head-dim 128 --intermediate 1536 --vocab 320 --draft-layers 2 --draft-features 3 --dtype bfloat16 \
  2>&1 | tee -a "$OUTD/steps.log"
COMMON=$(server_flags "$P/target" 0.09)
DD="--speculative-algorithm DDTREE --speculative-draft-model-path $P/dflash"
declare -A ARGS ENVS
ARGS[base]=""
ARGS[dflash_fi]="--speculative-algorithm DFLASH --speculative-draft-model-path $P/dflash --attention-backend flashinfer"
ARGS[dd_tree]="$DD"
ARGS[dd_cascade]="$DD"; ENVS[dd_cascade]="SGLANG_DDTREE_PREFIX=flashinfer"
ARGS[dd_cascade_fi]="$DD --attention-backend flashinfer"; ENVS[dd_cascade_fi]="SGLANG_DDTREE_PREFIX=flashinfer SGLANG_DDTREE_BUDGET=auto"
ARGS[dd_cascade_page16]="$DD --page-size 16"; ENVS[dd_cascade_page16]="SGLANG_DDTREE_PREFIX=flashinfer SGLANG_DDTREE_BUDGET=auto"
ARGS[dd_cascade_page64]="$DD --page-size 64"; ENVS[dd_cascade_page64]="SGLANG_DDTREE_PREFIX=flashinfer SGLANG_DDTREE_BUDGET=auto"
ARGS[dd_cascade_nograph]="$DD --disable-cuda-graph"; ENVS[dd_cascade_nograph]="SGLANG_DDTREE_PREFIX=flashinfer"
# the drafter's attention through the same cascade (SGLANG_DDTREE_DRAFT_ATTENTION=ddtree), on triton and flashinfer
ARGS[dd_draft_cascade]="$DD"; ENVS[dd_draft_cascade]="SGLANG_DDTREE_DRAFT_ATTENTION=ddtree"
ARGS[dd_draft_cascade_fi]="$DD --attention-backend flashinfer"; ENVS[dd_draft_cascade_fi]="SGLANG_DDTREE_DRAFT_ATTENTION=ddtree"
# split backends: prefill on FlashInfer, the verify (decode half) and the drafter on triton, the drafter through the
# cascade (the long-context candidate of docs/SERVING.md)
ARGS[dd_split]="$DD --prefill-attention-backend flashinfer --speculative-attention-mode decode
 --speculative-draft-attention-backend triton"; ENVS[dd_split]="SGLANG_DDTREE_DRAFT_ATTENTION=ddtree"
# the served default, exactly as a user types it (the plugin's default backends: args.default_backends); every other
# server names its backend (triton where it names none)
ARGS[dd_default]="$DD"
for k in "${!ARGS[@]}"; do
  [ "$k" = dd_default ] || [[ "${ARGS[$k]}" == *--attention-backend* ]] || ARGS[$k]="${ARGS[$k]} --attention-backend triton"
done
SG_PORT0=34000 serve_compare "$OUTD" "$COMMON" base
log "done"
