#!/usr/bin/env bash
# Verify attention (issue 4): GPU tests against the reference, compute-sanitizer on the kernel, benchmark.
# env: ATTN_BENCH_ARGS (e.g. --quick), ATTN_SANITIZE_TOOLS (default "memcheck racecheck synccheck"; "" skips)
set -u
rc=0
python3 -m pytest -q tests/attention -p no:cacheprovider 2>&1 | tee "$STEP_OUT/tests.log" | tail -25
[ "${PIPESTATUS[0]}" -eq 0 ] || rc=1
for tool in ${ATTN_SANITIZE_TOOLS-memcheck racecheck synccheck}; do
    PYTORCH_NO_CUDA_MEMORY_CACHING=1 timeout 150 compute-sanitizer --tool $tool --error-exitcode 9 \
      python3 tests/attention/attn_sanitize.py >"$STEP_OUT/sanitize_$tool.log" 2>&1
    s=$?; echo "sanitizer $tool rc=$s"; tail -4 "$STEP_OUT/sanitize_$tool.log"; [ $s -eq 0 ] || rc=1
done
python3 -m sglang_ddtree.bench attention --out "$STEP_OUT" ${ATTN_BENCH_ARGS:-} 2>&1 | tail -150 || rc=1
exit $rc
