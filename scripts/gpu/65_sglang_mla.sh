#!/usr/bin/env bash
# SGLang 0.5.17 with the trained tiny MLA pair (DeepSeek-V3 shapes: latent 512 + rope 64, 16 heads; held-out
# prompts): DDTree's TARGET_VERIFY through the tree kernel's MLA layout on the triton (default), flashmla (page
# size 64) and flashinfer MLA backends (the prefix through FlashMLA, FlashInfer-MLA or the tree kernel), with CUDA
# graphs and without, and stock DFLASH on triton, each
# greedy-compared with the server without speculation on triton (correctness, servers in parallel); then the
# A/B with SGLang's own client at c = 1 and 16, one server measured at a time (the others up and idle).
# env (SG_*, MLA_AB_*): scripts/README.md
set -u
cd "$(dirname "$0")/../.."
OUTD=${STEP_OUT:-${OUT:-/tmp}/sglang_mla}; mkdir -p "$OUTD"
source scripts/gpu/sglang_env.sh
MLA_TARGET=$PWD/sglang_ddtree/engine/models/tiny-mla-target
MLA_DRAFTER=$PWD/sglang_ddtree/engine/models/tiny-mla-dflash
MLA_COMMON="$(server_flags "$MLA_TARGET" 0.75) --attention-backend triton"
DD="--speculative-algorithm DDTREE --speculative-draft-model-path $MLA_DRAFTER --speculative-num-draft-tokens 17"
declare -A ARGS ENVS
ARGS[base]=""
MLA_DFLASH="--speculative-algorithm DFLASH --speculative-draft-model-path $MLA_DRAFTER"  # the A/B's too (SG_ONLY may drop ARGS[dflash])
ARGS[dflash]="$MLA_DFLASH"
ARGS[dd16]="$DD"
ARGS[dd16_nograph]="$DD --disable-cuda-graph"
# the tiny drafter's head dim 32 is below what FlashInfer's prefill and FlashMLA take: it drafts on triton
DRAFT_TRITON="--speculative-draft-attention-backend triton"
ARGS[dd16_flashmla]="$DD --attention-backend flashmla --page-size 64 $DRAFT_TRITON"
ARGS[dd16_flashinfer]="$DD --attention-backend flashinfer $DRAFT_TRITON"
# dd16_flashmla: FlashMLA over the prefix, our kernel over the tree, merged by LSE (the default there);
# dd16_flashmla_tree: our kernel over prefix and tree (SGLANG_DDTREE_MLA_PREFIX=tree)
ARGS[dd16_flashmla_nograph]="${ARGS[dd16_flashmla]} --disable-cuda-graph"
ARGS[dd16_flashmla_tree]="${ARGS[dd16_flashmla]}"; ENVS[dd16_flashmla_tree]="SGLANG_DDTREE_MLA_PREFIX=tree"
# the accepted KV moved for every layer in one launch (SGLANG_DDTREE_MLA_KV_MOVE=one_launch, opt-in)
ARGS[dd16_flashmla_one_launch]="${ARGS[dd16_flashmla]}"; ENVS[dd16_flashmla_one_launch]="SGLANG_DDTREE_MLA_KV_MOVE=one_launch"
ARGS[dd16_one_launch]="$DD"; ENVS[dd16_one_launch]="SGLANG_DDTREE_MLA_KV_MOVE=one_launch"
# FlashInfer-MLA over the prefix (SGLANG_DDTREE_PREFIX=flashinfer, opt-in): on its own backend and on triton
ARGS[dd16_flashinfer_fi]="${ARGS[dd16_flashinfer]}"; ENVS[dd16_flashinfer_fi]="SGLANG_DDTREE_PREFIX=flashinfer"
ARGS[dd16_fi]="$DD"; ENVS[dd16_fi]="SGLANG_DDTREE_PREFIX=flashinfer"
SG_PORT0=32000 serve_compare "$OUTD" "$MLA_COMMON" base
if [ "${MLA_AB_TIMEOUT:-240}" != 0 ]; then
  timeout ${MLA_AB_TIMEOUT:-240} python3 -m sglang_ddtree.bench.ab --out "$OUTD/ab" --common "$MLA_COMMON" \
    --server "base=" --server "dflash=$MLA_DFLASH" --server "ddtree_b16=$DD" \
    --prompts-file "$HELDOUT" --concurrency ${MLA_AB_CONC:-1 16} --num-prompts 64 --prompts-per-conc 8 \
    --output-len 64 --repeats 3 --start-all --interleave --port 32100
  log "ab rc=$?"
fi
log "done"
tar -C "$OUTD" -czf "$OUTD.tar.gz" . && find "$OUTD" -name 'server_*.log' -delete -o -name 'bs_*.jsonl' -delete
