# Sourced by the SGLang GPU steps: SGLang 0.5.17 from the carried bundle (.sgl/, `make gpu-bundle`), the
# plugin's entry point, a `datasets` stub for sglang.bench_serving (it imports `datasets` at import time; the
# lean bundle has none and our prompts are local files), the tiny pair's paths and the common server flags.
# a server left by an earlier step (killed by its timeout) would hold its port and GPU memory
pkill -f "sglang.launch_server" 2>/dev/null && sleep 5
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 NCCL_NVLS_ENABLE=0
export TORCH_EXTENSIONS_DIR=${TORCH_EXTENSIONS_DIR:-/tmp/torch_ext} FLASHINFER_WORKSPACE_BASE=/tmp/fi
source scripts/gpu/fi_aot.sh
unpack_bundle
install_fi_aot
[ -f /tmp/site_pin/.done ] || { mkdir -p /tmp/site_pin && _x .sgl/tf-pin.tar.xz /tmp/site_pin && touch /tmp/site_pin/.done; }
EP=/tmp/ddtree_ep/sglang_ddtree-0.1.0.dist-info; mkdir -p "$EP"
printf 'Metadata-Version: 2.1\nName: sglang-ddtree\nVersion: 0.1.0\n' > "$EP/METADATA"
printf '[sglang.srt.plugins]\nddtree = sglang_ddtree.sglang.plugin:register\n' > "$EP/entry_points.txt"
mkdir -p /tmp/stubs/datasets
printf 'def load_dataset(*a, **k):\n    raise RuntimeError("datasets stub: pass a local --dataset-path")\n' > /tmp/stubs/datasets/__init__.py
export PYTHONPATH=/tmp/site_pin:/tmp/site:$PWD:/tmp/ddtree_ep:/tmp/stubs
python3 -c "from sglang_ddtree import _build; _build.load_cuda()" >/dev/null 2>&1 || echo "ops build FAILED"
TARGET=$PWD/sglang_ddtree/engine/models/tiny-target
DRAFTER=$PWD/sglang_ddtree/engine/models/tiny-dflash
HELDOUT=$PWD/sglang_ddtree/engine/models/heldout_prompts.json
# server_flags MODEL MEM_FRACTION: the flags every correctness/A-B server of a tiny pair shares
# (no attention backend: pin_triton gives every server but the served defaults triton)
server_flags() {
  echo "--model-path $1 --sampling-backend pytorch --grammar-backend none" \
    "--mem-fraction-static $2 --max-total-tokens 65536 --cuda-graph-bs 1 2 4 8 16 32 --disable-prefill-cuda-graph" \
    "--max-running-requests 32 --random-seed 0"
}
TINY_COMMON="$(server_flags "$TARGET" 0.75) --attention-backend triton"
# pin_triton: each server of the array S (--server NAME=ARGS pairs) that names no --attention-backend gets triton,
# but the served defaults (ddtree_default, ddtree_default_before: exactly what a user types, the plugin choosing)
pin_triton() {
  local i
  for ((i = 1; i < ${#S[@]}; i += 2)); do
    case "${S[i]%%=*}" in ddtree_default|ddtree_default_before) continue;; esac
    [[ "${S[i]}" == *--attention-backend* ]] || S[i]="${S[i]} --attention-backend triton"
  done
}
DFLASH_ARGS="--speculative-algorithm DFLASH --speculative-draft-model-path $DRAFTER"
DDTREE_AUTO_ARGS="--speculative-algorithm DDTREE --speculative-draft-model-path $DRAFTER"  # with SGLANG_DDTREE_BUDGET=auto
# the target's prefill on FlashInfer through SGLang's hybrid backend, TARGET_VERIFY and the drafter kept on triton
SPLIT_ARGS="--prefill-attention-backend flashinfer --speculative-attention-mode decode --speculative-draft-attention-backend triton"
# log MESSAGE: a line with the seconds since the step sourced this file, on stdout and in $OUTD/steps.log
t0=$(date +%s); log() { echo "[$(( $(date +%s) - t0 ))s] $*" | tee -a "$OUTD/steps.log"; }
ddtree_args() { echo "--speculative-algorithm DDTREE --speculative-draft-model-path $DRAFTER --speculative-num-draft-tokens $(( $1 + 1 ))"; }

# serve_start OUTD COMMON: start every server named in the ARGS / ENVS arrays together (COMMON flags, then its own;
# ENVS: its environment) and wait until each is ready or has exited (PORT / PID: per server; ready.txt). SG_ONLY
# keeps the named servers; SG_WAIT (420 s: on a fresh machine three tiny servers started together spent over
# 130 s in their first graph capture, compiling), SG_PORT0. serve_stop OUTD: stop them, keep each log's errors.
serve_start() {
  local OUTD=$1 COMMON=$2 name p
  if [ -n "${SG_ONLY:-}" ]; then
    for name in "${!ARGS[@]}"; do printf '%s\n' $SG_ONLY | grep -qx "$name" || unset "ARGS[$name]"; done
  fi
  declare -gA PORT PID
  p=${SG_PORT0:-31000}
  for name in "${!ARGS[@]}"; do
    PORT[$name]=$p
    env ${ENVS[$name]:-} setsid python3 -m sglang.launch_server $COMMON --host 127.0.0.1 --port $p ${ARGS[$name]} \
      > "$OUTD/server_$name.log" 2>&1 &
    PID[$name]=$!; p=$((p+1))
  done
  log "launched ${#ARGS[@]} servers"
  local T=(); for name in "${!ARGS[@]}"; do T+=("$name:${PORT[$name]}:${PID[$name]}"); done
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
}
ready() { grep -q "^$1 READY" "$OUTD/ready.txt"; }
serve_stop() {
  local OUTD=$1 name
  for name in "${!PID[@]}"; do kill -- -"${PID[$name]}" 2>/dev/null; done
  for name in "${!ARGS[@]}"; do
    grep -E "Traceback|Error|error:|DDTREE|sglang-ddtree|FULL_MASK|tree kernel|leak" "$OUTD/server_$name.log" \
      | grep -v "DeprecationWarning\|FutureWarning" | tail -60 > "$OUTD/server_$name.errors"
  done
}

# serve_compare OUTD COMMON REF: serve_start, then compare every other server greedily with REF on the held-out
# prompts (scripts/sglang_lossless.py: identity, near-ties explained), then serve_stop. Correctness only: the
# servers run in parallel. SG_PROMPTS, SG_TOKENS.
serve_compare() {
  local OUTD=$1 COMMON=$2 REF=$3 name
  serve_start "$OUTD" "$COMMON"
  local S=""; for name in "${!ARGS[@]}"; do [ $name != $REF ] && ready $name && S="$S --server $name=http://127.0.0.1:${PORT[$name]}"; done
  if ready $REF; then
    timeout ${SG_LOSSLESS_TIMEOUT:-240} python3 scripts/sglang_lossless.py --ref $REF=http://127.0.0.1:${PORT[$REF]} $S \
      --prompts-file "$HELDOUT" --num-prompts "${SG_PROMPTS:-64}" --max-new-tokens "${SG_TOKENS:-64}" \
      --out "$OUTD/lossless.json" > "$OUTD/lossless.txt" 2>&1
    log "lossless rc=$?"; cat "$OUTD/lossless.txt"
  fi
  serve_stop "$OUTD"
}
