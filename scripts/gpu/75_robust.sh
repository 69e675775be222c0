#!/usr/bin/env bash
# No request takes a DDTree server down, and each request feature is served as the plain server serves it
# (scripts/robust_check.py: grammar, sampling filters, penalties, independent samples, logprobs, the context
# limit then idle, load with disconnects and retraction). Three servers of the trained tiny pair, up together:
# DDTree with its default flags, the same model without speculation, and that with --disable-overlap-schedule
# (the penalties' reference). A small pool (16k tokens) and context (2048) put load and long requests at the
# edge. SGLang's default grammar backend (xgrammar) is on. env (ROBUST_*, SG_WAIT): scripts/README.md
set -u
cd "$(dirname "$0")/../.."
OUTD=${STEP_OUT:-${OUT:-/tmp}/robust}; mkdir -p "$OUTD"
source scripts/gpu/sglang_env.sh
ROBUST_COMMON="--model-path $TARGET --attention-backend triton --sampling-backend pytorch --mem-fraction-static 0.15
 --max-total-tokens 16384 --context-length 2048 --cuda-graph-bs 1 2 4 8 16 32 --disable-prefill-cuda-graph
 --max-running-requests 32 --random-seed 0"
declare -A ARGS ENVS
ARGS[ddtree]="--speculative-algorithm DDTREE --speculative-draft-model-path $DRAFTER"
ARGS[plain]=""
ARGS[plain_sync]="--disable-overlap-schedule"
SG_PORT0=33000 serve_start "$OUTD" "$ROBUST_COMMON"
if ready ddtree && ready plain && ready plain_sync; then
  timeout ${ROBUST_TIMEOUT:-420} python3 scripts/robust_check.py --ddtree http://127.0.0.1:${PORT[ddtree]} \
    --plain http://127.0.0.1:${PORT[plain]} --plain-sync http://127.0.0.1:${PORT[plain_sync]} \
    --prompts-file "$HELDOUT" --num-prompts "${ROBUST_PROMPTS:-16}" --out "$OUTD/robust.json" 2>&1 | tee "$OUTD/robust.txt"
  log "robust rc=${PIPESTATUS[0]}"
fi
grep -c "leak" "$OUTD/server_ddtree.log" | xargs -I{} log "leak lines in the DDTree log: {}"
serve_stop "$OUTD"
log "done"
