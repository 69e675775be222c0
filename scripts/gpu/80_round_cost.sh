#!/usr/bin/env bash
# Per-round cost on a Qwen3-8B-shaped target + 5-layer block-16 DFlash drafter with dummy weights
# (examples/qwen3-8b-shaped/): acceptance is ~1, so one output token is one decode round and bench_serving's
# TPOT is the round time. DFLASH (verify width 16) vs DDTree budget 15 (the same width) and budget 31/63,
# random token-id prompts of 1k tokens at c=1,16,32 and 8k at c=1, output 64; torch-profiler captures at
# c=1 and c=16. One server is up at a time (RC_START_ALL=1 starts them together with the memory split: on
# 2026-12-03 the DFLASH server then found too little free memory for its KV cache and exited).
# env: RC_WORKLOADS ("1024@1,16,32 8192@1"; add 32768@1 when the call has time), RC_BUDGETS ("15 63"),
# RC_FLASHINFER (1: also DDTree at the first budget on flashinfer), RC_AUTO (1: also SGLANG_DDTREE_BUDGET=auto,
# candidates 15/31/63), RC_FULLMASK (1: also the first budget through SGLang's FULL_MASK verify, the path the tree
# kernel replaced: the "before" profile), RC_START_ALL (0: one server up at a time; 1: all start together, memory split)
set -u
cd "$(dirname "$0")/../.."
OUTD=${STEP_OUT:-${OUT:-/tmp}/round_cost}; mkdir -p "$OUTD"
source scripts/gpu/sglang_env.sh
T=/tmp/q8b_target; D=/tmp/q8b_dflash
mkdir -p $T $D
cp examples/qwen3-8b-shaped/target-config.json $T/config.json
cp examples/qwen3-8b-shaped/dflash-b16-config.json $D/config.json
python3 scripts/mk_wordlevel_tokenizer.py $T 151936 && cp $T/tokenizer*.json $D/
BUDGETS=${RC_BUDGETS:-15 63}
ALL=""; n=1; [ "${RC_START_ALL:-0}" = 1 ] && { ALL=--start-all; n=$(( 4 + $(echo $BUDGETS | wc -w) )); }
FRAC=$(python3 -c "print(round(min(0.8, 0.92 / $n), 2))")
COMMON="--model-path $T --load-format dummy --speculative-draft-load-format dummy --dtype bfloat16
 --attention-backend triton --sampling-backend pytorch --grammar-backend none --mem-fraction-static $FRAC
 --max-total-tokens 131072 --context-length 40960 --chunked-prefill-size 8192 --cuda-graph-bs 1 2 4 8 16 32
 --disable-prefill-cuda-graph --max-running-requests 32 --random-seed 0"
S=(--server "dflash=--speculative-algorithm DFLASH --speculative-draft-model-path $D")
for b in $BUDGETS; do
  S+=(--server "ddtree_b$b=--speculative-algorithm DDTREE --speculative-draft-model-path $D --speculative-num-draft-tokens $((b + 1))")
done
# the tree kernel inside FlashInfer's target backend (head dim 128; the tiny pair's 32 has no FlashInfer prefill)
b0=${BUDGETS%% *}
[ "${RC_FLASHINFER:-1}" = 1 ] && S+=(--server "ddtree_b${b0}_flashinfer=--speculative-algorithm DDTREE --speculative-draft-model-path $D --speculative-num-draft-tokens $((b0 + 1)) --attention-backend flashinfer")
DD="--speculative-algorithm DDTREE --speculative-draft-model-path $D"
[ "${RC_AUTO:-1}" = 1 ] && S+=(--server "ddtree_auto=SGLANG_DDTREE_BUDGET=auto $DD")
[ "${RC_FULLMASK:-0}" = 1 ] && S+=(--server "ddtree_b${b0}_fullmask=SGLANG_DDTREE_VERIFY_ATTENTION=full_mask $DD --speculative-num-draft-tokens $((b0 + 1))")
echo "servers: dflash ddtree {$BUDGETS} auto=${RC_AUTO:-1} fullmask=${RC_FULLMASK:-0}, mem fraction $FRAC each" | tee "$OUTD/setup.txt"
timeout ${RC_TIMEOUT:-560} python3 examples/ab_bench.py --out "$OUTD" --common "$COMMON" "${S[@]}" \
  --tokenizer $T --random-input-len ${RC_WORKLOADS:-1024@1,16,32 8192@1} --num-prompts 8 --prompts-per-conc 4 \
  --output-len 64 --profile-concurrency 1 16 --profile-steps 10 --start-timeout 400 $ALL
rc=$?
for f in "$OUTD"/server_*.log; do
  grep -E "Traceback|Error|DDTREE|sglang-ddtree|Decode batch" "$f" | grep -v Warning | tail -40 > "${f%.log}.errors"
done
tar -C "$OUTD" -czf "$OUTD.tar.gz" . && find "$OUTD" -name 'server_*.log' -delete -o -name 'bs_*.jsonl' -delete
exit $rc
