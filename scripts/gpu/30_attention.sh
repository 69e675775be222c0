#!/usr/bin/env bash
# Verify attention (issue 4): FlashInfer's cold JIT time, GPU tests against the reference, compute-sanitizer
# on our kernel, benchmark (CUDA-graph timing). Writes tests.log, sanitize_*.log, attention{,_jit}.{json,md}.
# Then the served kernel against its prefix split count (verify_splits.{json,md}), and the served verify's
# FlashInfer cascade (issue 28): its GPU tests (cascade_tests.log) and a layer's verify attention, cascade vs
# our whole-prefix kernel vs DFLASH's 16-token FlashInfer verify (verify_cascade.{json,md}).
# env (ATTN_STEPS selects the parts; *_BENCH_ARGS, ATTN_SANITIZE_TOOLS): scripts/README.md
set -u
rc=0
steps=" ${ATTN_STEPS:-jit tests sanitize bench splits cascade} "
want() { [[ "$steps" == *" $1 "* ]]; }
if want jit; then
  # a fresh FlashInfer cache so the first calls measure the JIT compile; the tests and the bench reuse it
  export FLASHINFER_WORKSPACE_BASE=${FLASHINFER_WORKSPACE_BASE:-$(mktemp -d /tmp/fi_cache.XXXX)}
  python3 -m sglang_ddtree.bench attention --jit-only --out "$STEP_OUT" 2>&1 | tail -8
else
  export FLASHINFER_WORKSPACE_BASE=${FLASHINFER_WORKSPACE_BASE:-/tmp/fi}  # the tests step's compiled modules
fi
if want tests; then
  python3 -m pytest -q tests/attention -p no:cacheprovider 2>&1 | tee "$STEP_OUT/tests.log" | tail -25
  [ "${PIPESTATUS[0]}" -eq 0 ] || rc=1
fi
if want sanitize; then
  for tool in ${ATTN_SANITIZE_TOOLS-memcheck racecheck synccheck}; do
    PYTORCH_NO_CUDA_MEMORY_CACHING=1 timeout 150 compute-sanitizer --tool $tool --error-exitcode 9 \
      python3 tests/attention/attn_sanitize.py >"$STEP_OUT/sanitize_$tool.log" 2>&1
    s=$?; echo "sanitizer $tool rc=$s"; tail -4 "$STEP_OUT/sanitize_$tool.log"; [ $s -eq 0 ] || rc=1
  done
fi
if want bench; then
  GRID="--grid mla:4096,8192,32768:9,17,33,65:1,8 --grid mla:4096,8192,32768:9,65:32,64 --grid gqa:4096,8192,32768:9,17,33,65:1,32 --grid gqa:8192:9,65:64"
  python3 -m sglang_ddtree.bench attention --out "$STEP_OUT" ${ATTN_BENCH_ARGS:-$GRID} 2>&1 | tail -150 || rc=1
fi
if want splits; then
  # the served kernel's prefix split (batch 1-16, prefix 1k-32k, contiguous and shuffled slots)
  python3 -m sglang_ddtree.bench verify_splits --out "$STEP_OUT" ${SPLITS_BENCH_ARGS:-} 2>&1 | tail -80 || rc=1
fi
if want cascade; then
  # the FlashInfer prefix cascade: real FlashInfer against the reference (widths 16/32/64, batch 1/4/16, pages
  # 1/16/64, CUDA-graph replay), then the per-layer timing that decides attention/choose.AUTO_GQA_PREFIX
  python3 -m pytest -q -p no:cacheprovider tests/attention/test_flashinfer_prefix_cpu.py \
    tests/attention/test_flashinfer_prefix_gpu.py 2>&1 | tee "$STEP_OUT/cascade_tests.log" | tail -15
  [ "${PIPESTATUS[0]}" -eq 0 ] || rc=1
  python3 -m sglang_ddtree.bench verify_splits --sweep cascade --out "$STEP_OUT" ${CASCADE_BENCH_ARGS:-} 2>&1 | tail -40
  [ "${PIPESTATUS[0]}" -eq 0 ] || rc=1
fi
exit $rc
