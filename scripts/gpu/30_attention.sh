#!/usr/bin/env bash
# Verify attention (issue 4): FlashInfer's cold JIT time, GPU tests against the reference, compute-sanitizer
# on our kernel, benchmark (CUDA-graph timing). Writes tests.log, sanitize_*.log, attention{,_jit}.{json,md}.
# Then the served kernel against its prefix split count (verify_splits.{json,md}).
# env: ATTN_BENCH_ARGS (default: the MLA/GQA grid below; "--quick" for a smoke run), SPLITS_BENCH_ARGS,
#      ATTN_SANITIZE_TOOLS (default "memcheck racecheck synccheck"; "" skips)
set -u
rc=0
# a fresh FlashInfer cache so the first calls measure the JIT compile; the tests and the bench reuse it
export FLASHINFER_WORKSPACE_BASE=${FLASHINFER_WORKSPACE_BASE:-$(mktemp -d /tmp/fi_cache.XXXX)}
python3 -m sglang_ddtree.bench attention --jit-only --out "$STEP_OUT" 2>&1 | tail -8
python3 -m pytest -q tests/attention -p no:cacheprovider 2>&1 | tee "$STEP_OUT/tests.log" | tail -25
[ "${PIPESTATUS[0]}" -eq 0 ] || rc=1
for tool in ${ATTN_SANITIZE_TOOLS-memcheck racecheck synccheck}; do
  PYTORCH_NO_CUDA_MEMORY_CACHING=1 timeout 150 compute-sanitizer --tool $tool --error-exitcode 9 \
    python3 tests/attention/attn_sanitize.py >"$STEP_OUT/sanitize_$tool.log" 2>&1
  s=$?; echo "sanitizer $tool rc=$s"; tail -4 "$STEP_OUT/sanitize_$tool.log"; [ $s -eq 0 ] || rc=1
done
GRID="--grid mla:4096,8192,32768:9,17,33,65:1,8 --grid mla:4096,8192,32768:9,65:32,64 --grid gqa:4096,8192,32768:9,17,33,65:1,32 --grid gqa:8192:9,65:64"
python3 -m sglang_ddtree.bench attention --out "$STEP_OUT" ${ATTN_BENCH_ARGS:-$GRID} 2>&1 | tail -150 || rc=1
# the served kernel's prefix split (batch 1-16, prefix 1k-32k, contiguous and shuffled slots)
python3 -m sglang_ddtree.bench verify_splits --out "$STEP_OUT" ${SPLITS_BENCH_ARGS:-} 2>&1 | tail -80 || rc=1
exit $rc
