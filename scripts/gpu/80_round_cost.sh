#!/usr/bin/env bash
# Per-round cost on a dummy-weight target + DFlash drafter (RC_PAIR: examples/qwen3-8b-shaped/, GQA, or
# examples/kimi-k2-shaped/, MLA): acceptance is ~1, so one output token is one decode round and bench_serving's
# TPOT is the round time. DFLASH (verify width 16) against DDTree at budget 15 (the same width) and larger, the
# served default and its backend variants, random token-id prompts of 1k and 8k tokens; torch-profiler captures
# (ab_profiles.md sets each DDTree round beside DFLASH's, kernel by kernel). One server is up at a time by default
# (started together, on 2026-12-03 the DFLASH server found too little memory for its KV cache and exited).
# env (RC_*): scripts/README.md
set -u
cd "$(dirname "$0")/../.."
OUTD=${STEP_OUT:-${OUT:-/tmp}/round_cost}; mkdir -p "$OUTD"
[ -n "${RC_STAGE_TIMES:-}" ] && export SGLANG_DDTREE_STAGE_TIMES=$RC_STAGE_TIMES
source scripts/gpu/sglang_env.sh
PAIR=${RC_PAIR:-qwen3-8b-shaped}
T=/tmp/$PAIR-target; D=/tmp/$PAIR-dflash
mkdir -p $T $D
cp examples/$PAIR/target-config.json $T/config.json
cp examples/$PAIR/dflash-b16-config.json $D/config.json
VOCAB=$(python3 -c "import json; print(json.load(open('$T/config.json'))['vocab_size'])")
python3 scripts/mk_wordlevel_tokenizer.py $T $VOCAB && cp $T/tokenizer*.json $D/
MLA=0; [ "$PAIR" = kimi-k2-shaped ] && MLA=1
BUDGETS=${RC_BUDGETS:-15 63}
COMMON="--model-path $T --load-format dummy --speculative-draft-load-format dummy --dtype bfloat16
 --sampling-backend pytorch --grammar-backend none
 --max-total-tokens 131072 --context-length 40960 --chunked-prefill-size 8192 --cuda-graph-bs 1 2 4 8 16 32
 --disable-prefill-cuda-graph --max-running-requests 32 --random-seed 0"
S=()
if [ "${RC_TRITON:-1}" = 1 ]; then
  for b in $BUDGETS; do
    S+=(--server "ddtree_b$b=--speculative-algorithm DDTREE --speculative-draft-model-path $D --speculative-num-draft-tokens $((b + 1))")
  done
  S+=(--server "dflash=--speculative-algorithm DFLASH --speculative-draft-model-path $D")
fi
# the tree kernel inside FlashInfer's target backend (head dim 128; the tiny pair's 32 has no FlashInfer prefill)
b0=${BUDGETS%% *}
[ "${RC_FLASHINFER:-1}" = 1 ] && S+=(--server "ddtree_b${b0}_flashinfer=--speculative-algorithm DDTREE --speculative-draft-model-path $D --speculative-num-draft-tokens $((b0 + 1)) --attention-backend flashinfer")
DD="--speculative-algorithm DDTREE --speculative-draft-model-path $D"
[ "${RC_AUTO:-1}" = 1 ] && S+=(--server "ddtree_auto=SGLANG_DDTREE_BUDGET=auto $DD")
# exactly what a user types: no budget, no backend (the plugin's default budget and backends: args.default_backends)
S+=(--server "ddtree_default=$DD")
# the default with its drafter on flashinfer (its attention over the context, which on triton grows the round with
# the context: round-cost-h200-2026-12-04-long-context.md), the target's modes still on triton
[ $MLA = 0 ] && [ "${RC_DRAFT_FI:-1}" = 1 ] && S+=(--server "ddtree_fi_drafter=$DD --speculative-draft-attention-backend flashinfer")
# the default with the drafter's attention through DDTree's cascade (SGLANG_DDTREE_DRAFT_ATTENTION=ddtree: FlashInfer
# over the context, our kernel over the block), the target's modes on triton
[ $MLA = 0 ] && [ "${RC_DRAFT_CASCADE:-1}" = 1 ] && S+=(--server "ddtree_draft_cascade=SGLANG_DDTREE_DRAFT_ATTENTION=ddtree $DD")
# the same with the prefill on FlashInfer (SGLang's hybrid backend; TARGET_VERIFY kept on triton by the decode mode,
# the drafter kept on triton): what is left of the 8k gap is triton's prefill
[ $MLA = 0 ] && [ "${RC_SPLIT:-1}" = 1 ] && S+=(--server "ddtree_split=SGLANG_DDTREE_DRAFT_ATTENTION=ddtree $DD $SPLIT_ARGS")
# DFLASH on flashinfer (its fastest backend here at long context); DDTree's auto budget with our kernel over the
# whole prefix (SGLANG_DDTREE_PREFIX=tree: the GQA default before the cascade) and with the cascade on flashinfer
if [ $MLA = 0 ] && [ "${RC_CASCADE:-1}" = 1 ]; then
  S+=(--server "dflash_flashinfer=--speculative-algorithm DFLASH --speculative-draft-model-path $D --attention-backend flashinfer")
  S+=(--server "ddtree_auto_tree=SGLANG_DDTREE_PREFIX=tree SGLANG_DDTREE_BUDGET=auto $DD")
  S+=(--server "ddtree_auto_fi=SGLANG_DDTREE_BUDGET=auto $DD --attention-backend flashinfer")
fi
# RC_FA3 (default: GPU_FA3, wherever sgl_kernel's FA3 was carried: scripts/build_fa3_parts.sh): DFLASH on fa3 (SGLang's default on
# Hopper) and DDTree's auto budget on fa3 (the prefix through FA3, the tree through our kernel)
if [ $MLA = 0 ] && [ "${RC_FA3:-${GPU_FA3:-0}}" = 1 ]; then
  S+=(--server "dflash_fa3=--speculative-algorithm DFLASH --speculative-draft-model-path $D --attention-backend fa3")
  S+=(--server "ddtree_auto_fa3=SGLANG_DDTREE_BUDGET=auto $DD --attention-backend fa3")
  # ddtree_split with the prefill on fa3 instead of FlashInfer (which prefill a split default should take)
  S+=(--server "ddtree_split_fa3=$DD --attention-backend triton --prefill-attention-backend fa3 --speculative-attention-mode decode --speculative-draft-attention-backend triton")
fi
# RC_WINDOW (2048 by default; empty: none): DFLASH with its drafter's compact KV window
# (--speculative-draft-window-size, 0.5.17's --speculative-dflash-draft-window-size), as users run it at long context,
# on flashinfer and (with RC_FA3) fa3
if [ $MLA = 0 ] && [ -n "${RC_WINDOW-2048}" ]; then
  W="--speculative-draft-window-size ${RC_WINDOW-2048}"
  S+=(--server "dflash_flashinfer_window=--speculative-algorithm DFLASH --speculative-draft-model-path $D --attention-backend flashinfer $W")
  [ "${RC_FA3:-${GPU_FA3:-0}}" = 1 ] \
    && S+=(--server "dflash_fa3_window=--speculative-algorithm DFLASH --speculative-draft-model-path $D --attention-backend fa3 $W")
fi
if [ $MLA = 1 ] && [ "${RC_FLASHMLA:-1}" = 1 ]; then
  FM="--attention-backend flashmla --page-size 64 --speculative-draft-attention-backend triton"
  S+=(--server "dflash_flashmla=--speculative-algorithm DFLASH --speculative-draft-model-path $D $FM")
  # the default there: the prefix through FlashMLA, the tree through our kernel, merged by LSE; then our kernel
  # over the whole prefix (a call cut short keeps DFLASH and the served default)
  S+=(--server "ddtree_b${b0}_flashmla=$DD --speculative-num-draft-tokens $((b0 + 1)) $FM")
  [ "${RC_MLA_PREFIX:-1}" = 1 ] && S+=(--server "ddtree_b${b0}_flashmla_tree=SGLANG_DDTREE_MLA_PREFIX=tree $DD --speculative-num-draft-tokens $((b0 + 1)) $FM")
  # the accepted KV moved for every layer in one launch (opt-in until measured)
  [ "${RC_MLA_KV_MOVE:-0}" = 1 ] && S+=(--server "ddtree_b${b0}_flashmla_one_launch=SGLANG_DDTREE_MLA_KV_MOVE=one_launch $DD --speculative-num-draft-tokens $((b0 + 1)) $FM")
fi
# RC_MLA_FI (kimi-k2-shaped, 1 by default): DFLASH on flashinfer (FlashInfer-MLA) and DDTree there with the prefix
# through FlashInfer-MLA (SGLANG_DDTREE_PREFIX=flashinfer, opt-in until measured; ddtree_b*_flashinfer: our kernel)
if [ $MLA = 1 ] && [ "${RC_MLA_FI:-1}" = 1 ]; then
  S+=(--server "dflash_flashinfer=--speculative-algorithm DFLASH --speculative-draft-model-path $D --attention-backend flashinfer")
  S+=(--server "ddtree_b${b0}_flashinfer_fi=SGLANG_DDTREE_PREFIX=flashinfer $DD --speculative-num-draft-tokens $((b0 + 1)) --attention-backend flashinfer")
fi
# first, next to the first budget on the tree kernel: a call cut short keeps the before/after pair
[ $MLA = 0 ] && [ "${RC_FULLMASK:-0}" = 1 ] && S=(--server "ddtree_b${b0}_fullmask=SGLANG_DDTREE_VERIFY_ATTENTION=full_mask $DD --speculative-num-draft-tokens $((b0 + 1))" "${S[@]}")
# RC_SERVERS: keep only these servers, in this order (a repeat in the other order tells drift from cost)
if [ -n "${RC_SERVERS:-}" ]; then
  K=(); for want in $RC_SERVERS; do for ((i = 1; i < ${#S[@]}; i += 2)); do
    [ "${S[i]%%=*}" = "$want" ] && K+=(--server "${S[i]}"); done; done; S=("${K[@]}")
fi
pin_triton
ALL=""; n=1
[ "${RC_START_ALL:-0}" = 1 ] && { ALL="--start-all --interleave --repeats ${RC_REPEATS:-3}"; n=$(( ${#S[@]} / 2 )); }
FRAC=$(python3 -c "print(round(min(0.8, 0.92 / $n), 2))")
COMMON="$COMMON --mem-fraction-static $FRAC"
echo "$PAIR servers: ${S[*]}, mem fraction $FRAC each" | tee "$OUTD/setup.txt"
timeout ${RC_TIMEOUT:-560} python3 -m sglang_ddtree.bench.ab --out "$OUTD" --common "$COMMON" "${S[@]}" \
  --tokenizer $T --random-input-len ${RC_WORKLOADS:-1024@1,16,32 8192@1} --num-prompts ${RC_PROMPTS:-8} --prompts-per-conc ${RC_PER_CONC:-4} \
  --output-len 64 --profile-concurrency ${RC_PROFILE-1 16} --profile-steps 10 --start-timeout 400 $ALL
rc=$?
for f in "$OUTD"/server_*.log; do
  grep -E "Traceback|Error|DDTREE|sglang-ddtree|Decode batch" "$f" | grep -v Warning | tail -40 > "${f%.log}.errors"
done
tar -C "$OUTD" -czf "$OUTD.tar.gz" . && find "$OUTD" -name 'server_*.log' -delete -o -name 'bs_*.jsonl' -delete
exit $rc
