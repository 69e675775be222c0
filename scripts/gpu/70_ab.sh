#!/usr/bin/env bash
# The A/B with SGLang's own client (python -m sglang_ddtree.bench.ab -> python -m sglang.bench_serving): the trained
# tiny pair (AB_PAIR=inflated: inflated to Qwen3-8B shapes, docs/inflated-pair.md), held-out prompts, the server
# without speculation, DFLASH and DDTree's served default, auto and fixed budgets and the paper's tree, one server
# measured at a time; torch-profiler captures of DFLASH and DDTree rounds. A run too long for one device call is
# split by AB_CONC and joined with `python -m sglang_ddtree bench ab --merge A/ab.json B/ab.json@32`. AB_TRAFFIC
# measures every server under several traffics in one start; AB_BEFORE=1 serves ddtree_default from an older copy of
# the plugin too (.before/, written by scripts/mk_before.sh and carried to the machine).
# env (AB_*): scripts/README.md
set -u
cd "$(dirname "$0")/../.."
OUTD=${STEP_OUT:-${OUT:-/tmp}/ab}; mkdir -p "$OUTD"
source scripts/gpu/sglang_env.sh
COMMON=$TINY_COMMON
INFLATED=$([ "${AB_PAIR:-tiny}" = inflated ] && echo 1 || echo 0)  # the inflated pair's servers are on by default
TOKENS=$([ $INFLATED = 1 ] && echo 128 || echo 64)
if [ $INFLATED = 1 ]; then
  P=/tmp/pair8b
  [ -f $P/target/config.json ] || python3 scripts/inflate_pair.py --out $P --device cuda 2>&1 | tail -3
  DRAFTER=$P/dflash
  DFLASH_ARGS="--speculative-algorithm DFLASH --speculative-draft-model-path $DRAFTER"
  DDTREE_AUTO_ARGS="--speculative-algorithm DDTREE --speculative-draft-model-path $DRAFTER"
  COMMON=$(server_flags "$P/target" 0.8)
fi
S=()
# AB_BEFORE=1: the served default on the plugin in .before/ (scripts/mk_before.sh REV), the first server; its twin
# ddtree_default is served too. PYTHONPATH is expanded here: .before/ ahead of the bundle's paths, which it keeps;
# PYTHONSAFEPATH=1, else `python -m` puts the working directory (this checkout's plugin) ahead of PYTHONPATH. Checked,
# and its native library built now, not inside the server's start-up timeout
if [ "${AB_BEFORE:-0}" = 1 ]; then
  BEFORE_ENV="PYTHONSAFEPATH=1 PYTHONPATH=$PWD/.before:$PYTHONPATH"
  env $BEFORE_ENV python3 -c "import sglang_ddtree as p; assert p.__file__.startswith('$PWD/.before/'), p.__file__" \
    || { echo "AB_BEFORE=1: .before/'s plugin is not what the server would import (scripts/mk_before.sh; carry .before)"
         exit 1; }
  env $BEFORE_ENV python3 -c "from sglang_ddtree import _build; _build.load_cuda()" >/dev/null 2>&1 \
    || echo ".before ops build FAILED"
  S+=(--server "ddtree_default_before=$BEFORE_ENV $DDTREE_AUTO_ARGS")
fi
[ "${AB_BASE:-1}" = 1 ] && S+=(--server "base=")
S+=(--server "dflash=$DFLASH_ARGS")
[ "${AB_DFLASH_FI:-$INFLATED}" = 1 ] \
  && S+=(--server "dflash_flashinfer=$DFLASH_ARGS --attention-backend flashinfer")
{ [ $INFLATED = 1 ] || [ "${AB_BEFORE:-0}" = 1 ]; } && S+=(--server "ddtree_default=$DDTREE_AUTO_ARGS")
# the served default on flashinfer (target, drafter and prefill there; the tree kernel with FlashInfer's prefix): with
# DFLASH on both backends, what decides DDTree's default backend at short context (inflated pair: on by default)
[ "${AB_DDTREE_FI:-$INFLATED}" = 1 ] \
  && S+=(--server "ddtree_default_flashinfer=$DDTREE_AUTO_ARGS --attention-backend flashinfer")
# the drafter's attention through DDTree's cascade: what decides whether that knob becomes the default at short context
[ "${AB_DRAFT_CASCADE:-$INFLATED}" = 1 ] \
  && S+=(--server "ddtree_draft_cascade=SGLANG_DDTREE_DRAFT_ATTENTION=ddtree $DDTREE_AUTO_ARGS")
# ... and with the prefill on FlashInfer too (the candidate default for long prompts: is it as fast at short ones?)
[ "${AB_SPLIT:-$INFLATED}" = 1 ] \
  && S+=(--server "ddtree_split=SGLANG_DDTREE_DRAFT_ATTENTION=ddtree $DDTREE_AUTO_ARGS $SPLIT_ARGS")
# AB_FA3 (default: GPU_FA3, i.e. wherever sgl_kernel's FA3 was carried and put in place, scripts/build_fa3_parts.sh):
# DFLASH on fa3, SGLang's Hopper default, in every baseline, and DDTree's auto budget on fa3
[ "${AB_FA3:-${GPU_FA3:-0}}" = 1 ] && S+=(--server "dflash_fa3=$DFLASH_ARGS --attention-backend fa3") \
  && S+=(--server "ddtree_auto_fa3=SGLANG_DDTREE_BUDGET=auto $DDTREE_AUTO_ARGS --attention-backend fa3")
[ "${AB_TREE_PREFIX:-0}" = 1 ] && S+=(--server "ddtree_tree_prefix=SGLANG_DDTREE_PREFIX=tree $DDTREE_AUTO_ARGS")
[ -n "${AB_STAGE_TIMES:-}" ] \
  && S+=(--server "ddtree_default_times=SGLANG_DDTREE_STAGE_TIMES=$AB_STAGE_TIMES $DDTREE_AUTO_ARGS")
[ "${AB_AUTO:-1}" = 1 ] && S+=(--server "ddtree_auto=SGLANG_DDTREE_BUDGET=auto $DDTREE_AUTO_ARGS")
for b in ${AB_BUDGETS:-16 64}; do S+=(--server "ddtree_b$b=$(ddtree_args $b)"); done
# an A/A pair: a second server with the same flags as budget AB_TWIN; the two differ only by noise, so their gap
# is the smallest difference this run can resolve
[ -n "${AB_TWIN:-}" ] && S+=(--server "ddtree_b${AB_TWIN}_twin=$(ddtree_args $AB_TWIN)")
# the paper's tree (no chain anchor, raw draft probabilities) next to the served default, same budget
for b in ${AB_PAPER_BUDGETS-16}; do S+=(--server "ddtree_b${b}_paper=SGLANG_DDTREE_ANCHOR=none SGLANG_DDTREE_CALIBRATION=off SGLANG_DDTREE_CHILDREN=$([ "${AB_PAPER_TOP:-1}" = 1 ] && echo top || echo drawn) $(ddtree_args $b)"); done
if [ -n "${AB_SERVERS:-}" ]; then
  K=(); for want in $AB_SERVERS; do for ((i = 1; i < ${#S[@]}; i += 2)); do
    [ "${S[i]%%=*}" = "$want" ] && K+=(--server "${S[i]}"); done; done; S=("${K[@]}")
fi
pin_triton
# AB_TRAFFIC='greedy=;t06=--temperature 0.6 --top-p 0.95': one --traffic per item
T=(); IFS=';' read -ra ITEMS <<< "${AB_TRAFFIC:-}"; for t in "${ITEMS[@]}"; do [ -n "$t" ] && T+=(--traffic "$t"); done
timeout ${AB_TIMEOUT:-540} python3 -m sglang_ddtree.bench.ab --out "$OUTD" --common "$COMMON" "${S[@]}" \
  --prompts-file "$HELDOUT" --concurrency ${AB_CONC:-1 4 16 32} --num-prompts ${AB_PROMPTS:-64} --prompts-per-conc ${AB_PER_CONC:-8} \
  --output-len ${AB_TOKENS:-$TOKENS} --repeats ${AB_REPEATS:-3} --bench-args "${AB_BENCH_ARGS:-}" "${T[@]}" --profile-concurrency ${AB_PROFILE_CONC-1 16} ${AB_START_ALL:+--start-all} \
  $([ -n "${AB_START_ALL:-}" ] && [ "${AB_INTERLEAVE:-1}" = 1 ] && echo --interleave)
rc=$?
for f in "$OUTD"/server_*.log; do grep -E "Traceback|Error|DDTREE|sglang-ddtree" "$f" | grep -v Warning | tail -60 > "${f%.log}.errors"; done
tar -C "$OUTD" -czf "$OUTD.tar.gz" . && find "$OUTD" -name 'server_*.log' -delete -o -name 'bs_*.jsonl' -delete
exit $rc
