#!/usr/bin/env bash
# SGLang 0.5.17 correctness on the GPU with the trained tiny pair (held-out prompts): DDTree through the tree
# kernel (default), through SGLang's FULL_MASK fallback, at page size 16 and 64, with CUDA graphs off (with and
# without overlap), and stock DFLASH, each greedy-compared with the server without speculation; every
# divergence checked against the reference's top-2 log-probs (scripts/sglang_lossless.py). Correctness only:
# servers run in parallel here; speed is measured one server at a time by the ab step.
# The auto budget (SGLANG_DDTREE_BUDGET=auto) is served with and without CUDA graphs.
# env: SG_PROMPTS (64), SG_TOKENS (64), SG_WAIT (420 s), SG_ONLY (names of the servers to run; default all)
set -u
cd "$(dirname "$0")/../.."
OUTD=${STEP_OUT:-${OUT:-/tmp}/sglang}; mkdir -p "$OUTD"
source scripts/gpu/sglang_env.sh
t0=$(date +%s); log() { echo "[$(( $(date +%s) - t0 ))s] $*" | tee -a "$OUTD/steps.log"; }
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
if [ -n "${SG_ONLY:-}" ]; then
  for name in "${!ARGS[@]}"; do printf '%s\n' $SG_ONLY | grep -qx "$name" || unset "ARGS[$name]"; done
fi
# No flashinfer server here: FlashInfer has no prefill kernel for the tiny pair's head dim 32 (the target's own
# prefill fails, with or without DDTree); flashinfer is served on the 8B-shaped pair (head dim 128) in round_cost.
declare -A PORT PID
p=31000
for name in "${!ARGS[@]}"; do
  PORT[$name]=$p
  env ${ENVS[$name]:-} setsid python3 -m sglang.launch_server $TINY_COMMON --host 127.0.0.1 --port $p ${ARGS[$name]} \
    > "$OUTD/server_$name.log" 2>&1 &
  PID[$name]=$!; p=$((p+1))
done
log "launched ${#ARGS[@]} servers"
T=(); for name in "${!ARGS[@]}"; do T+=("$name:${PORT[$name]}:${PID[$name]}"); done
python3 - "${SG_WAIT:-420}" "${T[@]}" > "$OUTD/ready.txt" <<'PY'
import os, sys, time, urllib.request
wait, t0 = float(sys.argv[1]), time.time()
left = {n: (p, int(pid)) for n, p, pid in (a.split(":") for a in sys.argv[2:])}
while left and time.time() - t0 < wait:
    for n, (p, pid) in list(left.items()):
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{p}/health_generate", timeout=5); print(n, "READY", round(time.time() - t0)); left.pop(n)
        except Exception:
            try:
                os.kill(pid, 0)
            except OSError:  # the server exited: no point waiting for it
                print(n, "NOT_READY exited", round(time.time() - t0)); left.pop(n)
    time.sleep(2)
for n in left: print(n, "NOT_READY")
PY
log "ready: $(grep -c "^[^ ]* READY" "$OUTD/ready.txt") / ${#ARGS[@]}; $(grep NOT_READY "$OUTD/ready.txt" | tr '\n' ' ')"
S=""; for name in "${!ARGS[@]}"; do [ $name != base ] && grep -q "^$name READY" "$OUTD/ready.txt" && S="$S --server $name=http://127.0.0.1:${PORT[$name]}"; done
if grep -q "^base READY" "$OUTD/ready.txt"; then
  timeout ${SG_LOSSLESS_TIMEOUT:-240} python3 scripts/sglang_lossless.py --ref base=http://127.0.0.1:${PORT[base]} $S \
    --prompts-file "$HELDOUT" --num-prompts "${SG_PROMPTS:-64}" --max-new-tokens "${SG_TOKENS:-64}" \
    --out "$OUTD/lossless.json" > "$OUTD/lossless.txt" 2>&1
  log "lossless rc=$?"; cat "$OUTD/lossless.txt"
fi
for name in "${!PID[@]}"; do kill -- -"${PID[$name]}" 2>/dev/null; done
for name in "${!ARGS[@]}"; do
  grep -E "Traceback|Error|error:|DDTREE|sglang-ddtree|FULL_MASK|tree kernel" "$OUTD/server_$name.log" \
    | grep -v "DeprecationWarning\|FutureWarning" | head -40 > "$OUTD/server_$name.errors"
done
log "done"
tar -C "$OUTD" -czf "$OUTD.tar.gz" . && find "$OUTD" -name 'server_*.log' -delete
