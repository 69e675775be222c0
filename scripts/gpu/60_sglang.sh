#!/usr/bin/env bash
# SGLang 0.5.17 end to end on the GPU: DDTree served by a real server through the plugin, token-identical
# to the same server without speculation (and compared with stock DFLASH), then the A/B against DFLASH.
# Needs the bundle carried in .sgl/ (scripts/build_sglang_bundle.sh .sgl lean). Servers start in parallel
# on one GPU (tiny models), so the whole step fits one device call.
# env: SG_BUDGETS (default "8 16 32 64"), SG_PROMPTS (100), SG_TOKENS (48), SG_AB (1), SG_WAIT (300 s),
#      SG_AB_CONC ("1 8 32"), SG_AB_TOKENS (64), SG_VARIANTS ("nograph nooverlap nograph_nooverlap": budget-16
#      servers with CUDA graphs and/or overlap off)
set -u
cd "$(dirname "$0")/../.."
OUTD=${STEP_OUT:-${OUT:-/tmp}/sglang}; mkdir -p "$OUTD"
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 NCCL_NVLS_ENABLE=0
export TORCH_EXTENSIONS_DIR=${TORCH_EXTENSIONS_DIR:-/tmp/torch_ext} FLASHINFER_WORKSPACE_BASE=/tmp/fi
t0=$(date +%s); log() { echo "[$(( $(date +%s) - t0 ))s] $*" | tee -a "$OUTD/steps.log"; }
x() { python3 -c "import sys,tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2], filter='fully_trusted')" "$1" "$2"; }
[ -f /tmp/site/.done ] || { mkdir -p /tmp/site && x .sgl/sgl-bundle.tar.xz /tmp/site && touch /tmp/site/.done; }
[ -f /tmp/site_pin/.done ] || { mkdir -p /tmp/site_pin && x .sgl/tf-pin.tar.xz /tmp/site_pin && touch /tmp/site_pin/.done; }
# entry-point metadata for the plugin (no package index here): a dist-info folder on the path
EP=/tmp/ddtree_ep/sglang_ddtree-0.1.0.dist-info; mkdir -p "$EP"
printf 'Metadata-Version: 2.1\nName: sglang-ddtree\nVersion: 0.1.0\n' > "$EP/METADATA"
printf '[sglang.srt.plugins]\nddtree = sglang_ddtree.sglang.plugin:register\n' > "$EP/entry_points.txt"
export PYTHONPATH=/tmp/site_pin:/tmp/site:$PWD:/tmp/ddtree_ep
log "setup done"
( python3 -c "from sglang_ddtree import _build; _build.load_cuda(); print('ops cuda ok')" > "$OUTD/ops_build.log" 2>&1 ) &
BUILD=$!
[ -d /tmp/tiny_t ] || { python3 scripts/mk_tiny_llama.py /tmp/tiny_t && python3 - <<'PY'
# peaked target logits (lm_head x50): greedy ties/near-ties would make token comparisons numerics-bound
from safetensors.numpy import load_file, save_file
t = load_file("/tmp/tiny_t/model.safetensors"); t["lm_head.weight"] = t["lm_head.weight"] * 50
save_file(t, "/tmp/tiny_t/model.safetensors", metadata={"format": "pt"})
PY
}
[ -d /tmp/tiny_d ] || python3 scripts/sglang_mk_tiny_drafter.py /tmp/tiny_t /tmp/tiny_d 8

# Several servers share the GPU: SGLang's start-up check wants (1 - mem_fraction_static) of the GPU free
# beyond what is already in use, so with a small fraction a server starting after others refuses ("Loaded
# weights leave no GPU memory for the KV cache"; seen on 2026-12-02 with 0.05). A large fraction plus a
# token cap keeps every KV pool small and the check satisfied whatever the start order.
COMMON="--host 127.0.0.1 --attention-backend triton --sampling-backend pytorch
 --grammar-backend none --mem-fraction-static 0.75 --max-total-tokens 65536 --cuda-graph-bs 1 2 4 8 16 32
 --disable-prefill-cuda-graph --max-running-requests 32 --random-seed 0"
# Main set: the engine's trained tiny pair (byte-level Qwen3 target + DFlash drafter, fp32), whose drafts are
# accepted deep into the tree, so a dropped or wrong tree mask shows up as a token mismatch. Fallback set: a
# random tiny Llama + dummy drafter (acceptance ~1), the configuration proven to start on 2026-12-02.
TRAINED="--model-path $PWD/sglang_ddtree/engine/models/tiny-target"
TDRAFT="--speculative-draft-model-path $PWD/sglang_ddtree/engine/models/tiny-dflash"
RANDOM_T="--model-path /tmp/tiny_t"
DRAFT="--speculative-draft-model-path /tmp/tiny_d --speculative-draft-load-format dummy"
declare -A ARGS
ARGS[base]="$TRAINED"
ARGS[dflash]="$TRAINED --speculative-algorithm DFLASH $TDRAFT"
for b in ${SG_BUDGETS:-8 16 32 64}; do
  ARGS[ddtree_b$b]="$TRAINED --speculative-algorithm DDTREE $TDRAFT --speculative-num-draft-tokens $((b+1))"
done
DD="$TRAINED --speculative-algorithm DDTREE $TDRAFT --speculative-num-draft-tokens 17"
for v in ${SG_VARIANTS:-nograph nooverlap nograph_nooverlap}; do
  case $v in nograph) f="--disable-cuda-graph";; nooverlap) f="--disable-overlap-schedule";;
    nograph_nooverlap) f="--disable-cuda-graph --disable-overlap-schedule";; esac
  ARGS[ddtree_b16_$v]="$DD $f"
done
ARGS[rbase]="$RANDOM_T"
ARGS[rddtree_b16]="$RANDOM_T --speculative-algorithm DDTREE $DRAFT --speculative-num-draft-tokens 17"
export AB_PROMPTS_FILE=$PWD/sglang_ddtree/engine/models/heldout_prompts.json
declare -A PORT PID
p=31000
for name in "${!ARGS[@]}"; do
  PORT[$name]=$p
  setsid python3 -m sglang.launch_server $COMMON --port $p ${ARGS[$name]} > "$OUTD/server_$name.log" 2>&1 &
  PID[$name]=$!; p=$((p+1))
done
log "launched ${#ARGS[@]} servers"
python3 -m sglang_ddtree.check > "$OUTD/check.txt" 2>&1; log "check rc=$? $(tail -1 "$OUTD/check.txt")"
wait $BUILD; log "ops build: $(tail -1 "$OUTD/ops_build.log")"
python3 - "${SG_WAIT:-300}" "${!PORT[@]}" -- "${PORT[@]}" > "$OUTD/ready.txt" <<'PY'
import sys, time, urllib.request
wait = float(sys.argv[1]); i = sys.argv.index("--"); names, ports = sys.argv[2:i], sys.argv[i + 1:]
left, t0 = dict(zip(names, ports)), time.time()
while left and time.time() - t0 < wait:
    for n, p in list(left.items()):
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{p}/health_generate", timeout=5); print(n, "READY", round(time.time() - t0)); left.pop(n)
        except Exception:
            pass
    time.sleep(2)
for n in left: print(n, "NOT_READY")
PY
log "ready: $(grep -c READY "$OUTD/ready.txt") / ${#ARGS[@]}; $(grep NOT_READY "$OUTD/ready.txt" | tr '\n' ' ')"
ready() { grep -q "^$1 READY" "$OUTD/ready.txt"; }
lossless() {  # lossless NAME REF SERVER... : greedy outputs of each ready SERVER vs REF on the same prompts
  local tag=$1 ref=$2; shift 2; local S=""
  for name in "$@"; do ready "$name" && S="$S --server $name=http://127.0.0.1:${PORT[$name]}"; done
  if ready "$ref" && [ -n "$S" ]; then
    timeout ${SG_LOSSLESS_TIMEOUT:-120} python3 scripts/sglang_lossless.py --ref $ref=http://127.0.0.1:${PORT[$ref]} $S \
      --num-prompts "${SG_PROMPTS:-100}" --max-new-tokens "${SG_TOKENS:-48}" --out "$OUTD/$tag.json" > "$OUTD/$tag.txt" 2>&1
    log "$tag rc=$?"; tail -20 "$OUTD/$tag.txt"
  fi
}
TRAINED_SERVERS=""; for name in "${!ARGS[@]}"; do case $name in base|r*) ;; *) TRAINED_SERVERS="$TRAINED_SERVERS $name";; esac; done
lossless lossless base $TRAINED_SERVERS
# DDTree against stock DFLASH: both run the target's verify path, so SGLang's verify-vs-decode numerics
# (a greedy near-tie can round differently in a one-token decode) cancel out of this comparison.
lossless lossless_vs_dflash dflash $(for n in $TRAINED_SERVERS; do case $n in ddtree*) echo $n;; esac; done)
AB_PROMPTS_FILE= lossless lossless_random rbase rddtree_b16
if [ "${SG_AB:-1}" = 1 ]; then
  AB=""; for name in base dflash $(for b in ${SG_BUDGETS:-8 16 32 64}; do echo ddtree_b$b; done); do
    ready "$name" && AB="$AB --server $name=http://127.0.0.1:${PORT[$name]}"; done
  timeout 200 python3 examples/ab_bench.py $AB --concurrency ${SG_AB_CONC:-1 8 32} --num-prompts 32 \
    --max-new-tokens "${SG_AB_TOKENS:-64}" --out "$OUTD/ab" > "$OUTD/ab.txt" 2>&1
  log "ab rc=$?"; tail -20 "$OUTD/ab.txt"
fi
for name in "${!PID[@]}"; do kill -- -"${PID[$name]}" 2>/dev/null; done
for name in "${!ARGS[@]}"; do
  grep -E "Traceback|Error|error:|DDTREE|sglang-ddtree|FAILED" "$OUTD/server_$name.log" | grep -v "DeprecationWarning\|FutureWarning" | head -40 > "$OUTD/server_$name.errors"
done
nvidia-smi --query-gpu=name,memory.used --format=csv > "$OUTD/nvidia_smi.txt" 2>&1
log "done"
# the device returns at most 8 files: one archive with everything, the summaries beside it
tar -C "$OUTD" -czf "$OUTD.tar.gz" . && find "$OUTD" -type f ! -name 'lossless.json' ! -name 'lossless_random.json' ! -name 'lossless_vs_dflash.json' ! -name 'ab_bench.json' \
  ! -name 'ab_bench.md' ! -name 'steps.log' -delete
