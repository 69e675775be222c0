#!/usr/bin/env bash
# The A/B with SGLang's own client (examples/ab_bench.py -> python -m sglang.bench_serving), trained tiny pair,
# held-out prompts as a ShareGPT-format file, concurrency {1,4,16,32}; one server measured at a time (with
# AB_START_ALL=1 the servers start together to save start-up time and the others sit idle while one is
# measured — ab.json says which; idle servers sleep, and with AB_INTERLEAVE=1, the default then, the servers take
# turns pass by pass). Torch-profiler captures of DFLASH and DDTree rounds at AB_PROFILE_CONC.
# env: AB_BUDGETS ("16 64"; the served default: chain-anchored, calibrated), AB_PAPER_BUDGETS ("16": the paper's tree),
# AB_AUTO (1: the auto budget, SGLANG_DDTREE_BUDGET=auto, measured right after DFLASH), AB_TWIN (a budget: its A/A
# twin, ddtree_b<budget>_twin), AB_BASE (1: the server
# without speculation), AB_CONC ("1 4 16 32"), AB_PROMPTS (64), AB_PER_CONC (8), AB_TOKENS (64), AB_REPEATS (3 measured passes, median), AB_PROFILE_CONC ("1 16"; "" for none)
# Six servers, five interleaved passes and four concurrencies overrun one 10-minute device call: run AB_CONC="1 4 16"
# and AB_CONC=32 in two calls and join them with `python examples/ab_bench.py --out DIR --merge A/ab.json B/ab.json`
# (B/ab.json@32: only that run's c=32 rows).
set -u
cd "$(dirname "$0")/../.."
OUTD=${STEP_OUT:-${OUT:-/tmp}/ab}; mkdir -p "$OUTD"
source scripts/gpu/sglang_env.sh
S=()
[ "${AB_BASE:-1}" = 1 ] && S+=(--server "base=")
S+=(--server "dflash=$DFLASH_ARGS")
[ "${AB_AUTO:-1}" = 1 ] && S+=(--server "ddtree_auto=SGLANG_DDTREE_BUDGET=auto $DDTREE_AUTO_ARGS")
for b in ${AB_BUDGETS:-16 64}; do S+=(--server "ddtree_b$b=$(ddtree_args $b)"); done
# an A/A pair: a second server with the same flags as budget AB_TWIN; the two differ only by noise, so their gap
# is the smallest difference this run can resolve
[ -n "${AB_TWIN:-}" ] && S+=(--server "ddtree_b${AB_TWIN}_twin=$(ddtree_args $AB_TWIN)")
# the paper's tree (no chain anchor, raw draft probabilities) next to the served default, same budget
for b in ${AB_PAPER_BUDGETS-16}; do S+=(--server "ddtree_b${b}_paper=SGLANG_DDTREE_ANCHOR=none SGLANG_DDTREE_CALIBRATION=off $(ddtree_args $b)"); done
timeout ${AB_TIMEOUT:-540} python3 examples/ab_bench.py --out "$OUTD" --common "$TINY_COMMON" "${S[@]}" \
  --prompts-file "$HELDOUT" --concurrency ${AB_CONC:-1 4 16 32} --num-prompts ${AB_PROMPTS:-64} --prompts-per-conc ${AB_PER_CONC:-8} \
  --output-len ${AB_TOKENS:-64} --repeats ${AB_REPEATS:-3} --profile-concurrency ${AB_PROFILE_CONC-1 16} ${AB_START_ALL:+--start-all} \
  $([ -n "${AB_START_ALL:-}" ] && [ "${AB_INTERLEAVE:-1}" = 1 ] && echo --interleave)
rc=$?
for f in "$OUTD"/server_*.log; do grep -E "Traceback|Error|DDTREE|sglang-ddtree" "$f" | grep -v Warning | tail -60 > "${f%.log}.errors"; done
tar -C "$OUTD" -czf "$OUTD.tar.gz" . && find "$OUTD" -name 'server_*.log' -delete -o -name 'bs_*.jsonl' -delete
exit $rc
