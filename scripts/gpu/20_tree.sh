#!/usr/bin/env bash
# GPU step for the CUDA tree stage (issue 3): build, GPU tests, compute-sanitizer on every kernel,
# benchmarks. Writes logs and JSON into $STEP_OUT. TREE_STEPS selects parts (env: scripts/README.md).
set -u
STEP_OUT=${STEP_OUT:-${OUT:-.out}}
mkdir -p "$STEP_OUT"
export PYTHONUNBUFFERED=1 TORCH_EXTENSIONS_DIR=${TORCH_EXTENSIONS_DIR:-/tmp/torch_ext}
[ -f pyproject.toml ] && export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
STEPS=${TREE_STEPS:-"build test probe bench sanitize"}
rc=0
has() { case " $STEPS " in *" $1 "*) return 0;; esac; return 1; }

if has build; then
  python3 -c "import time; t=time.time(); from sglang_ddtree import _build; _build.load_cuda(); print(f'cuda libraries {time.time()-t:.1f}s')" \
    2>&1 | tee "$STEP_OUT/build.log" | tail -5
  [ "${PIPESTATUS[0]}" -eq 0 ] || { echo "BUILD FAILED"; exit 1; }
fi
if has test; then
  python3 -m pytest -q -x -p no:cacheprovider tests/gpu/ -k "gpu_tree" -rs --junitxml="$STEP_OUT/tests.xml" \
    ${TREE_PYTEST_ARGS:-} 2>&1 | tee "$STEP_OUT/tests.log" | tail -25
  [ "${PIPESTATUS[0]}" -eq 0 ] || rc=1
fi
if has probe; then  # does a failing TORCH_CHECK inside an op raise RuntimeError (a CUDA one segfaulted once)?
  for case in cpu_accept cuda_accept cuda_topk; do
    python3 - "$case" >>"$STEP_OUT/probe.log" 2>&1 <<'PY'
import sys, torch
from sglang_ddtree import _build, ops
_build.load_cuda()
case = sys.argv[1]
dev = "cpu" if case.startswith("cpu") else "cuda"
t = torch.zeros(2, 3, dtype=torch.int64, device=dev)
print(case, "start", flush=True)
try:
    if case.endswith("accept"):
        torch.ops.sglang_ddtree.accept_tree(t, t, t, torch.ones(2, dtype=torch.int32, device=dev), t, -1)
    else:
        torch.ops.sglang_ddtree.topk_lse(torch.randn(2, 10, device=dev), 11)
    print(case, "no error raised")
except RuntimeError as e:
    print(case, "RuntimeError raised:", str(e).splitlines()[0])
PY
    echo "$case exit=$?" >>"$STEP_OUT/probe.log"
  done
  cat "$STEP_OUT/probe.log"
fi
if has bench; then
  python3 -m sglang_ddtree.bench tree_gpu --out "$STEP_OUT" ${TREE_BENCH_ARGS:-} 2>&1 | tee "$STEP_OUT/bench.log" | tail -60
  [ "${PIPESTATUS[0]}" -eq 0 ] || rc=1
  # the top-k and lattice builders' op times on the device (BASELINE_CHECKOUT=PATH adds another checkout's top-k)
  BENCH_DEVICE=cuda BENCH_OUT="$STEP_OUT/tree-build-cuda.json" python3 -m pytest -q -s -p no:cacheprovider \
    tests/core/bench_tree_build.py 2>&1 | tee "$STEP_OUT/bench_build.log" | tail -5
  [ "${PIPESTATUS[0]}" -eq 0 ] || rc=1
fi
if has sanitize; then
  for tool in memcheck racecheck synccheck; do
    timeout ${TREE_SANITIZE_TIMEOUT:-120} compute-sanitizer --tool $tool --error-exitcode 9 python3 scripts/gpu/sanitize_tree.py \
      >"$STEP_OUT/sanitize_$tool.log" 2>&1
    r=$?
    echo "compute-sanitizer $tool rc=$r: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|all kernels ran' "$STEP_OUT/sanitize_$tool.log" | tr '\n' ' ')"
    [ $r -eq 0 ] || { rc=1; grep -m 20 -E "=====" "$STEP_OUT/sanitize_$tool.log"; }
  done
fi
exit $rc
